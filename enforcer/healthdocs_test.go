package enforcer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every reason the enforcer marks a GPU unhealthy with is what Nomad shows as the units' health
// description: docs/plugin.md's table of health descriptions explains each one.
func TestHealthReasonsAreDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "plugin.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "\n### Health descriptions\n")
	if !ok {
		t.Fatal(`docs/plugin.md has no "### Health descriptions" section`)
	}
	table, _, _ = strings.Cut(table, "\n#")
	for _, reason := range []string{reasonMPSDied, reasonMPSDown, reasonForced, reasonStopped, reasonUnreadable} {
		if !strings.Contains(table, "`"+reason+"`") {
			t.Errorf("the health description %q is not in docs/plugin.md's table", reason)
		}
	}
}
