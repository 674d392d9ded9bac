package ledger

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// h200 is an H200's memory as NVML reports it; with the default 2GiB headroom it is 141 units.
const h200 = 143 * size.GiB

func benchLedger(b *testing.B, opts Options, gpus int) *Ledger {
	b.Helper()
	dir := ""
	if !opts.NoPersist {
		dir = b.TempDir()
	}
	l, err := Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	var inv []GPUInfo
	for i := range gpus {
		inv = append(inv, info(fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", i), i, h200))
	}
	if err := l.SyncGPUs(inv); err != nil {
		b.Fatal(err)
	}
	// A realistic load: 5 tasks of 20 units on every GPU, so admission works on a busy GPU.
	for _, g := range inv {
		for t := range 5 {
			ks := make([]int, 20)
			for i := range ks {
				ks[i] = 20 + t*20 + i
			}
			if _, err := l.ReserveIDs(ids(g.UUID, ks...), Task{JobName: fmt.Sprint("load", t)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return l
}

// benchReserve reuses the same two IDs every time, so each op ends the previous holder (the
// Nomad reuse path) and admits a new reservation.
func benchReserve(b *testing.B, opts Options) {
	l := benchLedger(b, opts, 8)
	req := ids(fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", 3), 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.ReserveIDs(req, Task{JobName: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserveIDs is admission plus the commit to disk (temp file, fsync, rename, fsync).
func BenchmarkReserveIDs(b *testing.B) { benchReserve(b, Options{}) }

// BenchmarkAdmissionOnly is the in-memory decision alone (NoPersist).
func BenchmarkAdmissionOnly(b *testing.B) { benchReserve(b, Options{NoPersist: true}) }

// BenchmarkStates8GPUs is what every fingerprint pass costs: 8 GPUs x 141 units.
func BenchmarkStates8GPUs(b *testing.B) {
	l := benchLedger(b, Options{NoPersist: true}, 8)
	b.ReportAllocs()
	for b.Loop() {
		st := l.States()
		if len(st) != 8 || len(st[7].Instances) != 141 {
			b.Fatalf("got %d GPUs, %d instances", len(st), len(st[7].Instances))
		}
	}
}

// BenchmarkStates8GPUsUncached is the first States after a change, when every GPU's state is
// computed afresh (BenchmarkStates8GPUs is the cached case between changes).
func BenchmarkStates8GPUsUncached(b *testing.B) {
	l := benchLedger(b, Options{NoPersist: true}, 8)
	b.ReportAllocs()
	for b.Loop() {
		l.mu.Lock()
		l.cache = nil
		l.mu.Unlock()
		if st := l.States(); len(st) != 8 || len(st[7].Instances) != 141 {
			b.Fatalf("got %d GPUs", len(st))
		}
	}
}

// BenchmarkPersist is one commit of the busy 8-GPU state (40 reservations) to disk.
func BenchmarkPersist(b *testing.B) {
	l := benchLedger(b, Options{}, 8)
	b.ReportAllocs()
	for b.Loop() {
		l.mu.Lock()
		err := l.commit(nil, false)
		l.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
}
