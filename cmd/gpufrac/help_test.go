package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// The top-level help points at documentation an installed binary's user can open, not at a
// path that exists only in a source checkout.
func TestHelpLinksTheDocs(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}} {
		var o, e bytes.Buffer
		if code := realMain(args, &o, &e); code != 0 {
			t.Fatalf("gpufrac %s: exit %d\n%s", args[0], code, e.String())
		}
		help := o.String() + e.String()
		if !strings.Contains(help, docsURL) {
			t.Errorf("gpufrac %s does not link %s:\n%s", args[0], docsURL, help)
		}
		if m := regexp.MustCompile(`(^|\s)docs/\S+`).FindString(help); m != "" {
			t.Errorf("gpufrac %s names a source-tree path %q", args[0], strings.TrimSpace(m))
		}
	}
}
