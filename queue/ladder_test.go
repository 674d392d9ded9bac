package queue

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLadderKeys(t *testing.T) {
	q := mustParse(t, `
max_attempts = 4
borrow_wait  = "2s"
template "fixed" {
  cap          = "8GiB"
  cap_fixed    = true
  max_attempts = 2
}
job "a" {
  template = "fixed"
  command  = ["x"]
}
job "b" {
  command      = ["x"]
  max_attempts = 1
  cap_fixed    = false
}
`)
	if q.MaxAttempts != 4 || q.BorrowWait != 2*time.Second {
		t.Errorf("queue max_attempts %d borrow_wait %s, want 4 and 2s", q.MaxAttempts, q.BorrowWait)
	}
	if s := q.Templates["fixed"]; !s.CapFixed || s.MaxAttempts != 2 {
		t.Errorf("template %+v: want cap_fixed and max_attempts 2", s)
	}
	if j := q.Jobs[1]; j.MaxAttempts != 1 || j.CapFixed == nil || *j.CapFixed || q.Jobs[0].MaxAttempts != 0 || q.Jobs[0].CapFixed != nil {
		t.Errorf("jobs %+v: want b bounded to 1 attempt with its cap not fixed, and a with nothing of its own", q.Jobs)
	}
}

func TestLadderKeysRefuseBadValues(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`max_attempts = 0`, "q.hcl:1,16: Invalid max_attempts: max_attempts = 0: want a whole number from 1 to 20"},
		{`max_attempts = 2.5`, "max_attempts = 2.5"},
		{`max_attempts = 21`, "want a whole number from 1 to 20"},
		{`max_attempts = "3"`, "max_attempts must be a number"},
		{`borrow_wait = "11m"`, "borrow_wait = 11m0s: want at most 10m"},
		{"template \"t\" {\n  cap_fixed = true\n}", "q.hcl:2,15: cap_fixed without a cap"},
		// A job's own cap_fixed fixes its template's declared cap, and needs one as much.
		{"template \"t\" {}\njob \"k\" {\n  template  = \"t\"\n  command   = [\"x\"]\n  cap_fixed = true\n}",
			`q.hcl:5,15: cap_fixed without a cap: job "k": cap_fixed = true fixes its template "t"'s declared cap; add cap = "..." to template "t"`},
		{"job \"k\" {\n  command   = [\"x\"]\n  cap_fixed = true\n}",
			`q.hcl:3,15: cap_fixed without a cap: job "k": cap_fixed = true fixes its template "k"'s declared cap; add cap = "..." to template "k"`},
		{"template \"t\" {\n  cap = \"1GiB\"\n  cap_fixed = \"yes\"\n}", "cap_fixed must be true or false, not string"},
	} {
		t.Run(tc.src, func(t *testing.T) {
			_, err := Parse([]byte(tc.src+"\njob \"j\" {\n  command = [\"x\"]\n}\n"), "q.hcl")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
