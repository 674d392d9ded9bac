package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// A critical XID kills the job on its GPU at once, before the node's next look at the GPU's
// health: the look the run takes at the failure sees it, so the job is re-run as collateral
// damage, elsewhere when another GPU is healthy. Where the XID took the run's every GPU out
// (they stay out until gpufrac restarts), the jobs left fail at once, saying so, rather than
// after the minutes a stuck run waits.
func TestAJobKilledByAnXIDIsCollateral(t *testing.T) {
	tests := []struct {
		name string
		gpus []string
		// want are job a's outcomes; b's are all ok, or failed when no GPU is left.
		want     []record.Outcome
		noneLeft bool
	}{
		{"another GPU takes the re-run", []string{"H100=80GiB", "H100=80GiB"},
			[]record.Outcome{record.OutcomeCollateral, record.OutcomeOK}, false},
		{"no GPU is left", []string{"H100=80GiB"},
			[]record.Outcome{record.OutcomeCollateral, record.OutcomeFailed}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim, _ := testutil.NewSim(t, tc.gpus...)
			o := testOptions(t, sim, record.ArmPacked)
			o.MaxConcurrent = 1 // b waits for a's slot: it is queued when the XID comes
			// Only the look at the failure may see the XID: the periodic one would be luck.
			o.healthPeriod = time.Hour
			var progress testutil.Buffer
			o.Progress = &progress

			marks := t.TempDir()
			started, release, failed := filepath.Join(marks, "a.started"), filepath.Join(marks, "release"), filepath.Join(marks, "failed")
			// a's first attempt writes its PID and GPU, waits for the test, and dies as a
			// process does whose context the XID took; its re-run succeeds.
			a := queue.Job{Name: "a", Template: "a", Command: []string{"sh", "-c", `
				if [ -f "$3" ]; then exit 0; fi
				echo "$$ $CUDA_VISIBLE_DEVICES" > "$1.tmp" && mv "$1.tmp" "$1"
				while [ ! -f "$2" ]; do sleep 0.02; done
				touch "$3"; echo "CUDA error: unspecified launch failure" >&2; exit 1`,
				"sh", started, release, failed}}
			q := behindA(t, a)
			run := runInBackground(t, q, o)

			var pid int
			var uuid string
			testutil.Eventually(t, faultWait, "job a to start", func() bool {
				b, err := os.ReadFile(started)
				if err != nil {
					return false
				}
				f := strings.Fields(string(b))
				if len(f) != 2 {
					return false
				}
				pid, err = strconv.Atoi(f[0])
				uuid = f[1]
				return err == nil
			})
			if err := sim.SetUsage(uuid, pid, size.GiB); err != nil {
				t.Fatal(err)
			}
			raised := time.Now()
			if err := sim.RaiseXID(uuid, 79); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			res := run.wait(t, "after job a failed", &progress)
			atts := attemptsOf(res, "a")
			if got := outcomes(atts); !slices.Equal(got, tc.want) {
				t.Fatalf("a's attempts %v, want %v; progress:\n%s", got, tc.want, progress.String())
			}
			if first := atts[0]; first.GPU != uuid || !strings.Contains(first.Detail, "XID 79") || !strings.Contains(first.Detail, "unspecified launch failure") {
				t.Errorf("a's first attempt on %s: %q; want it on %s, naming the XID and its last words", first.GPU, first.Detail, uuid)
			}
			var xid record.GPUEvent
			for _, ev := range res.GPUEvents {
				if strings.Contains(ev.Reason, "XID 79") {
					xid = ev
				}
			}
			if xid.Start.Before(raised) || !xid.Start.Before(atts[0].End) || !xid.End.IsZero() {
				t.Errorf("GPU events %+v: want XID 79's, from its time (after %s, before a's end %s), never ended", res.GPUEvents, raised, atts[0].End)
			}
			if !strings.Contains(progress.String(), "unhealthy: XID 79") {
				t.Errorf("the progress does not say the GPU went out of service:\n%s", progress.String())
			}
			bOut := outcomes(attemptsOf(res, "b"))
			if !tc.noneLeft {
				if atts[1].GPU == uuid {
					t.Errorf("a re-ran on %s, the GPU the XID took out", uuid)
				}
				if !slices.Equal(bOut, []record.Outcome{record.OutcomeOK}) {
					t.Errorf("b's attempts %v, want one, ok", bOut)
				}
				return
			}
			for _, at := range append(atts[1:], attemptsOf(res, "b")...) {
				if at.Outcome != record.OutcomeFailed || !strings.Contains(at.Detail, "no GPU left to run on") || !strings.Contains(at.Detail, "XID 79") {
					t.Errorf("%s's last attempt %s: %q; want it failed, no GPU left, naming the XID", at.Job, at.Outcome, at.Detail)
				}
			}
		})
	}
}
