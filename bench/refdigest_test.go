package bench

import (
	"path/filepath"
	"testing"
)

// The exclusive runs the plan's next H200 calls are checked against (docs/benchmarks.md, "The
// next H200 calls"): a run refuses a reference whose workloads digest differs from its own, and
// the digest covers every byte of the scripts, comments too. A comment's link edited on
// 2026-12-06 made every busy reference refuse the next call's arm, which spent a scarce H200
// call on nothing. Drop a reference from this list when the plan stops using it; where the
// workloads change on purpose, run those exclusive arms again with the new tree.
var plannedRefs = []struct {
	dir     string
	profile WorkloadProfile
}{
	{"2026-12-06-seed1-busy-exclusive", ProfileBusy},
	{"2026-12-05-seed3-busy-exclusive", ProfileBusy},
}

func TestPlannedReferencesRanTheseWorkloads(t *testing.T) {
	for _, r := range plannedRefs {
		t.Run(r.dir, func(t *testing.T) {
			s, err := LoadSummary(filepath.Join("..", "docs", "bench-results", r.dir, "summary.json"))
			if err != nil {
				t.Fatal(err)
			}
			mine, err := PythonWorkloads{Dir: filepath.Join("..", "examples", "workloads"), Profile: r.profile}.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if s.WorkloadsDigest != mine {
				t.Fatalf("reference %s ran workloads %s, this tree's are %s: an edit to examples/workloads (a comment counts) makes the next device call refuse it", r.dir, s.WorkloadsDigest, mine)
			}
		})
	}
}
