package runstatus

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// What a run writes, gpufrac status reads back whole; once removed, or before the first write,
// there is none; a damaged file is an error that names it.
func TestWriteReadRemove(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := Read(dir); ok || err != nil {
		t.Fatalf("before the first write: %v, %v; want none and no error", ok, err)
	}
	want := Status{PID: 7, Queue: "q.hcl", Arm: "packed", Start: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), Jobs: 2, Running: 1, Waiting: 1,
		Waits:    []Wait{{Reason: "a GPU to itself", Count: 1, Jobs: []string{"b"}}},
		GPUs:     []GPU{{Index: 0, Running: 1, UsedBytes: size.GiB, ReservedBytes: 2 * size.GiB, BudgetBytes: 78 * size.GiB}},
		Attempts: []Attempt{{Job: "a", Attempt: 1, MaxAttempts: 3, Room: "2GiB", GuaranteeBytes: 2 * size.GiB, LimitBytes: 2 * size.GiB}},
		Stopped:  []Stopped{}}
	if err := Write(dir, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := Read(dir)
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, %v, %v; want %+v", got, ok, err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, File+".tmp")); err == nil {
		t.Error("the temporary file was left beside the progress")
	}
	Remove(dir)
	if _, ok, err := Read(dir); ok || err != nil {
		t.Fatalf("after Remove: %v, %v; want none", ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, File), []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, File)) {
		t.Fatalf("damaged file: error %v, want one naming it", err)
	}
}

func TestInWords(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Attempt{Job: "leaker-1", Attempt: 2, MaxAttempts: 3, Room: "46GiB", LimitBytes: 78 * size.GiB, UsedBytes: 50 * size.GiB,
			BorrowedBytes: 4 * size.GiB}.String(), "leaker-1 on GPU0, attempt 2 of 3: guarantee 46GiB, limit 78GiB, using 50GiB (4GiB borrowed)"},
		{Attempt{Job: "eval", GPUIndex: 1, Attempt: 1, MaxAttempts: 3, Room: "whole GPU", LimitBytes: 78 * size.GiB}.String(),
			"eval on GPU1, attempt 1 of 3: guarantee whole GPU, limit 78GiB, using 0B"},
		{GPU{Index: 0, Running: 2, UsedBytes: 65 * size.GiB, ReservedBytes: 66 * size.GiB, BudgetBytes: 78 * size.GiB, BorrowedBytes: 3 * size.GiB}.String(),
			"GPU0: 2 running, using 65GiB, guarantees 66GiB of 78GiB, borrowed 3GiB"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
