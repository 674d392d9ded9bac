package gpuacc

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWatchdog measures the watchdog over real NVML with three PyTorch processes on the GPU
// (two reserved, one unmanaged): one Tick (ns/op), and the CPU share of Run at 10 and 100 Hz over
// a fixed window (core-% = CPU time of this process / wall time).
func BenchmarkWatchdog(b *testing.B) {
	h := newHarness(b, policy.ModeIsolated, policy.DefaultWatchdogInterval)
	var jobs []*job
	for _, name := range []string{"r1", "r2"} {
		jobs = append(jobs, h.run(h.reserve(4*size.GiB, name), name, "hold", "--mb", "1024", "--seconds", "60"))
	}
	jobs = append(jobs, h.run(ledger.Reservation{}, "u1", "hold", "--mb", "1024", "--seconds", "60"))
	for _, j := range jobs {
		j.ready(b)
	}
	b.Run("tick", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			h.enf.Tick(ctx)
		}
	})
	for _, hz := range []int{10, 100} {
		b.Run(fmt.Sprintf("run-%dHz", hz), func(b *testing.B) {
			p := h.led.Policy()
			p.WatchdogInterval = time.Second / time.Duration(hz)
			if err := h.led.SetPolicy(p); err != nil {
				b.Fatal(err)
			}
			// One fixed window per call, whatever b.N: the figure is a CPU share, not a time per op.
			const window = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), window)
			c0, t0 := cpuTime(), time.Now()
			_ = h.enf.Run(ctx)
			cancel()
			b.ReportMetric(100*float64(cpuTime()-c0)/float64(time.Since(t0)), "core-%")
		})
	}
}
