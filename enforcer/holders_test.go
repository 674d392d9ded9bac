package enforcer

import (
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/procfs"
)

func TestHoldersReadsTheProcessTableNow(t *testing.T) {
	procs := procfs.NewTable(
		procfs.Proc{PID: 40, PPID: 1, Start: 1, Env: []string{EnvReservation + "=tokA"}},
		procfs.Proc{PID: 41, PPID: 1, Start: 1, Env: []string{ReservationKey("GPU-b") + "=tokA"}},
		procfs.Proc{PID: 42, PPID: 1, Start: 1, Env: []string{EnvReservation + "=tokB"}},
	)
	r := newRig(t, "isolated", func(c *Config) { c.Procs = procs })
	got, err := r.enf.Holders("tokA")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{40, 41}) {
		t.Errorf("holders of tokA = %v, want [40 41]", got)
	}
	procs.Remove(40)
	procs.Remove(41)
	if got, err := r.enf.Holders("tokA"); err != nil || len(got) != 0 {
		t.Errorf("after its processes exited: holders %v, %v; want none", got, err)
	}
}
