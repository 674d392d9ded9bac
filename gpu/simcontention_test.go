package gpu_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

// TestSimulatedContention walks one GPU with two busy processes through contention off and on:
// off, each works at full speed whatever they want together (as before contention existed); on,
// demands that fit the SMs still leave each at full speed, demands past them slow each to its
// share less the switching cost, GPM shows the time lost to switching, and a process that stops
// computing neither slows nor is slowed.
func TestSimulatedContention(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H200=140GiB")
	uuid := devs[0].UUID
	g, err := s.OpenGPM(ctx, uuid)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	self, other := os.Getpid(), sleeper(t)
	busy := func(pid int, util float64) func() error {
		return func() error {
			return errors.Join(s.SetProcessLoad(uuid, pid, gpu.SimLoad{SMUtil: util, SMOccupancy: util / 2}),
				s.SetProcess(uuid, pid, size.GiB, true))
		}
	}
	steps := []struct {
		name                string
		do                  func() error
		selfRate, otherRate float64
		util                float64
	}{
		{"off, one busy", busy(self, 60), 1, 1, 60},
		{"off, past the SMs", busy(other, 90), 1, 1, 100},
		{"on, past the SMs: each its share less one switch", func() error {
			return s.SetContention(uuid, &gpu.SimContention{SwitchCost: 0.1})
		}, 100.0 / 150 * 0.9, 100.0 / 150 * 0.9, 90},
		{"on, within the SMs", busy(other, 40), 1, 1, 100},
		{"on, the other stops computing", func() error {
			return errors.Join(busy(other, 90)(), s.SetProcess(uuid, other, size.GiB, false))
		}, 1, 1, 60},
		{"on, no switching cost", func() error {
			return errors.Join(s.SetContention(uuid, &gpu.SimContention{}), busy(self, 100)(), busy(other, 100)())
		}, 0.5, 0.5, 100},
		{"off again", func() error { return s.SetContention(uuid, nil) }, 1, 1, 100},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, p := range []struct {
			pid  int
			want float64
		}{{self, st.selfRate}, {other, st.otherRate}} {
			r, err := s.WorkRate(ctx, uuid, p.pid)
			if err != nil || math.Abs(r-p.want) > 1e-9 {
				t.Errorf("%s: WorkRate(%d) = %g, %v; want %g", st.name, p.pid, r, err, p.want)
			}
		}
		r, err := g.Read(ctx)
		if err != nil || math.Abs(r.SMUtil-st.util) > 1e-9 {
			t.Errorf("%s: GPM SM util %g%%, %v; want %g%%", st.name, r.SMUtil, err, st.util)
		}
	}
}

// TestSimContentionErrors: a bad switch cost is refused naming the value, on set and on read.
func TestSimContentionErrors(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H200=140GiB")
	uuid := devs[0].UUID
	for _, c := range []float64{-0.1, 1, math.NaN()} {
		err := s.SetContention(uuid, &gpu.SimContention{SwitchCost: c})
		if err == nil || !strings.Contains(err.Error(), "switch cost") {
			t.Errorf("SetContention(%g) = %v, want an error naming the switch cost", c, err)
		}
	}
	if err := s.SetContention("GPU-nope", &gpu.SimContention{}); !errors.Is(err, gpu.ErrUnknownDevice) {
		t.Errorf("SetContention on an unknown GPU = %v, want ErrUnknownDevice", err)
	}
	// The setting's file, as another process sharing the state directory could leave it.
	if err := os.WriteFile(filepath.Join(s.Dir(), uuid, "contention"), []byte("lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WorkRate(ctx, uuid, os.Getpid()); err == nil || !strings.Contains(err.Error(), `"lots"`) {
		t.Errorf("WorkRate with an unreadable setting = %v, want an error naming it", err)
	}
}

// TestSimWorkClock: a job's work clock runs at the GPU's rate, read again as the rate changes.
func TestSimWorkClock(t *testing.T) {
	s, devs := testutil.NewSim(t, "H200=140GiB")
	uuid := devs[0].UUID
	self, other := os.Getpid(), sleeper(t)
	for _, p := range []int{self, other} {
		if err := errors.Join(s.SetProcessLoad(uuid, p, gpu.SimLoad{SMUtil: 100}), s.SetProcess(uuid, p, size.GiB, true)); err != nil {
			t.Fatal(err)
		}
	}
	c := s.WorkClock(uuid, self)
	if got := c.Advance(time.Second); got != time.Second {
		t.Fatalf("without contention a second of running is %s of work, want 1s", got)
	}
	if err := s.SetContention(uuid, &gpu.SimContention{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the clock to read the contended rate", func() bool {
		return c.Advance(time.Second) == 500*time.Millisecond
	})
}
