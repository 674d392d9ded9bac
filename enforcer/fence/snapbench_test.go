package fence_test

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// BenchmarkSnapshot is one watchdog pass's reading of a GPU's fence: eight tasks, each with two
// attached processes holding memory, merged into one table.
func BenchmarkSnapshot(b *testing.B) {
	dir := b.TempDir()
	tb, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	var tasks []fence.Task
	for i := range 8 {
		tasks = append(tasks, fence.Task{Token: fmt.Sprintf("bench-%d-%s", i, tokA[:8]), Cap: 8 * size.GiB})
	}
	if err := tb.SetTasks(tasks, 0); err != nil {
		b.Fatal(err)
	}
	for _, k := range tasks {
		for range 2 {
			c, err := fence.Attach(dir, fencetest.FakeUUID, k.Token)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Detach()
			if c.Charge(size.GiB) != fence.Charged {
				b.Fatal("refused")
			}
		}
	}
	for b.Loop() {
		s, err := tb.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		if len(s.Procs) != 16 {
			b.Fatalf("%d processes in the snapshot, want 16", len(s.Procs))
		}
	}
}
