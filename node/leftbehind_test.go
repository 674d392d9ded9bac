package node

import (
	"maps"
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/taskenv"
)

// Only the processes that carry a released reservation's token, by either of its variables, are
// stopped, each with its process group; a live reservation's processes and other processes are
// left alone.
func TestStopLeftBehindStopsOnlyTheReleasedJobs(t *testing.T) {
	const gone, live = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	procs := procfs.NewTable(
		procfs.Proc{PID: 100, PPID: 1, PGRP: 90, Env: []string{taskenv.Reservation + "=" + gone}},               // a shell's child
		procfs.Proc{PID: 101, PPID: 100, PGRP: 90, Env: []string{taskenv.ReservationKey("GPU-a") + "=" + gone}}, // its worker
		procfs.Proc{PID: 200, PPID: 1, PGRP: 200, Env: []string{taskenv.Reservation + "=" + live}},              // a running job's
		procfs.Proc{PID: 300, PPID: 1, Env: []string{"HOME=/root"}},                                             // not a job
	)
	for _, tc := range []struct {
		name     string
		released []ledger.Reservation
		want     map[string][]int
	}{
		{"none released", nil, nil},
		{"one released", []ledger.Reservation{{Token: gone}}, map[string][]int{gone: {100, 101}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var killed [][2]int
			got := stopLeftBehind(procs, tc.released, func(id attribution.Identity) { killed = append(killed, [2]int{id.PID, id.PGRP}) })
			for tok := range got {
				slices.Sort(got[tok])
			}
			if !maps.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("stopped %v, want %v", got, tc.want)
			}
			slices.SortFunc(killed, func(a, b [2]int) int { return a[0] - b[0] })
			if want := len(tc.want[gone]); len(killed) != want || want > 0 && (killed[0] != [2]int{100, 90} || killed[1] != [2]int{101, 90}) {
				t.Errorf("killed %v (pid, group), want 100 and 101 with their group 90", killed)
			}
		})
	}
}
