package fence_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// BenchmarkChargeUncharge is the fence's own work per allocation and free (the table's lock,
// the task's and the process's sums), through the same C the preload library runs: alone, and
// with four processes' slots charging one task at once. docs/benchmarks.md sets it against a
// cudaMalloc/cudaFree pair measured on the H200.
func BenchmarkChargeUncharge(b *testing.B) {
	for _, procs := range []int{1, 4} {
		b.Run(map[int]string{1: "one-process", 4: "four-processes"}[procs], func(b *testing.B) {
			dir := b.TempDir()
			tb, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer tb.Close()
			if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: 64 * size.GiB}}, 0); err != nil {
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
