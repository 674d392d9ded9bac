package fence_test

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// BenchmarkChargeUncharge is the fence's own work per allocation and free (the task's lock, its
// sums and the process's), through the same C the preload library runs: alone, and with four
// processes' slots charging one task at once, borrowing off; and alone beside seven other tasks
// with borrowing on, within its guarantee and past it (a borrow reads every other task's use).
// docs/bench/enforcer.md sets it against a cudaMalloc/cudaFree pair measured on the H200.
func BenchmarkChargeUncharge(b *testing.B) {
	for _, bc := range []struct {
		name   string
		procs  int
		budget size.Bytes
		borrow bool // each charge past the guarantee
	}{{"one-process", 1, 0, false}, {"four-processes", 4, 0, false}, {"one-process-borrowing-on", 1, 80 * size.GiB, false},
		{"one-process-borrowing", 1, 80 * size.GiB, true}} {
		procs := bc.procs
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			tb, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, bc.budget)
			if err != nil {
				b.Fatal(err)
			}
			defer tb.Close()
			tasks := []fence.Task{{Token: tokA, Cap: 64 * size.GiB, Limit: 72 * size.GiB}}
			if bc.budget != 0 {
				for i := range 7 {
					tasks = append(tasks, fence.Task{Token: fmt.Sprintf("neighbour-%d-%s", i, tokB[:8]), Cap: size.GiB})
				}
			}
			if err := tb.SetTasks(tasks, bc.budget); err != nil {
				b.Fatal(err)
			}
			clients := make(chan *fence.Client, procs)
			for range procs {
				c, err := fence.Attach(dir, fencetest.FakeUUID, tokA)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Detach()
				clients <- c
			}
			b.SetParallelism(1)
			if procs == 1 {
				c := <-clients
				if bc.borrow && c.Charge(64*size.GiB) != fence.Charged {
					b.Fatal("the guarantee refused")
				}
				for b.Loop() {
					if c.Charge(size.MiB) != fence.Charged {
						b.Fatal("refused")
					}
					c.Uncharge(size.MiB)
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				c := <-clients
				for pb.Next() {
					if c.Charge(size.MiB) != fence.Charged {
						b.Error("refused")
						return
					}
					c.Uncharge(size.MiB)
				}
			})
		})
	}
}
