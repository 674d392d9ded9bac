package enforcer

import (
	"strings"
	"testing"
)

// A borrowing rule or fence mode is one of its constants; anything else is refused with an
// error that names the bad value and what would do.
func TestBorrowRuleAndFenceModeCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		bad  string // "" = valid
		want []string
	}{
		{name: "off", err: BorrowOff.Check()},
		{name: "lend", err: BorrowLend.Check()},
		{name: "auto is the front ends', not a rule", err: BorrowRule("auto").Check(), bad: `"auto"`, want: []string{"off", "now", "wait", "lend"}},
		{name: "case matters", err: BorrowRule("Wait").Check(), bad: `"Wait"`},
		{name: "empty rule", err: BorrowRule("").Check(), bad: `""`},
		{name: "fence unset is auto", err: FenceMode("").Check()},
		{name: "fence on", err: FenceOn.Check()},
		{name: "fence yes", err: FenceMode("yes").Check(), bad: `"yes"`, want: []string{"auto", "on", "off"}},
	} {
		if tc.bad == "" {
			if tc.err != nil {
				t.Errorf("%s: %v, want valid", tc.name, tc.err)
			}
			continue
		}
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.bad) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, tc.err, tc.bad)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%s: %v does not list %q", tc.name, tc.err, w)
			}
		}
	}
}
