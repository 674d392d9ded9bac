package sched

import (
	"testing"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/size"
)

// A job's cap is fixed by its own cap_fixed where it says one, false included, else by its
// template's. Before, a job's false was not told from one left out, and could not undo its
// template's true.
func TestAJobsCapFixedWinsOverItsTemplates(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name         string
		template     bool
		job          *bool
		wantFixedCap bool
	}{
		{"template fixed, job silent", true, nil, true},
		{"template fixed, job false", true, &no, false},
		{"template free, job true", false, &yes, true},
		{"template free, job silent", false, nil, false},
	} {
		q := queue.Queue{
			Templates: map[string]queue.TemplateSpec{"t": {CapBytes: 4 * size.GiB, CapFixed: tc.template}},
			Jobs:      []queue.Job{{Name: "j", Template: "t", CapFixed: tc.job}},
		}
		if got := NewJobs(q)[0].FixedCap; got != tc.wantFixedCap {
			t.Errorf("%s: FixedCap %v, want %v", tc.name, got, tc.wantFixedCap)
		}
	}
}
