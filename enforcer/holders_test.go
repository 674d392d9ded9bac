package enforcer

import (
	"slices"
	"testing"
)

func TestHoldersReadsTheProcessTableNow(t *testing.T) {
	procs := fakeProcs{
		40: {ppid: 1, start: 1, env: []string{EnvReservation + "=tokA"}},
		41: {ppid: 1, start: 1, env: []string{ReservationKey("GPU-b") + "=tokA"}},
		42: {ppid: 1, start: 1, env: []string{EnvReservation + "=tokB"}},
	}
	r := newRig(t, "isolated", func(c *Config) { c.Procs = procs })
	got, err := r.enf.Holders("tokA")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{40, 41}) {
		t.Errorf("holders of tokA = %v, want [40 41]", got)
	}
	delete(procs, 40)
	delete(procs, 41)
	if got, err := r.enf.Holders("tokA"); err != nil || len(got) != 0 {
		t.Errorf("after its processes exited: holders %v, %v; want none", got, err)
	}
}
