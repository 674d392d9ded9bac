package record

import (
	"encoding/csv"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

func TestCapLabel(t *testing.T) {
	now := time.Now()
	tests := []struct {
		a    Attempt
		want string
	}{
		{Attempt{Capped: true, CapBytes: 9 * size.GiB}, "9GiB"},
		{Attempt{Capped: true, WholeGPU: true, CapBytes: 78 * size.GiB}, "whole GPU"},
		{Attempt{}, "none"},
		{Attempt{Capped: true, CapBytes: 5 * size.GiB, CapChanges: []CapChange{{At: now, From: 39 * size.GiB, To: 5 * size.GiB}}}, "39GiB -> 5GiB"},
	}
	for _, tt := range tests {
		if got := tt.a.CapLabel(); got != tt.want {
			t.Errorf("CapLabel(%+v) = %q, want %q", tt.a, got, tt.want)
		}
	}
	a := tests[3].a
	if a.CapAt(now.Add(-time.Second)) != 39*size.GiB || a.CapAt(now) != 5*size.GiB {
		t.Errorf("CapAt: %s before the change, %s at it", a.CapAt(now.Add(-time.Second)), a.CapAt(now))
	}
}

// A job's ladder reads attempt by attempt, borrowing marked; attempts.csv carries the
// guarantee, the limit, what was borrowed at the peak, the wait and the next step in their
// columns.
func TestLadderAndBorrowColumns(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	atts := []Attempt{
		{Job: "lk", Number: 1, Capped: true, CapBytes: 3 * size.GiB, LimitBytes: 78 * size.GiB, PeakBytes: 5 * size.GiB, BorrowedBytes: 2 * size.GiB,
			BorrowWait: 1500 * time.Millisecond, GuaranteeWait: 2500 * time.Millisecond, Start: t0, End: t0.Add(time.Second), Outcome: OutcomeCapViolation,
			Next: "attempt 2 of 3 with an 8GiB guarantee (x)", NextKind: "raise", NextCapBytes: 8 * size.GiB},
		{Job: "n1", Number: 1, Capped: true, CapBytes: 6 * size.GiB, Start: t0, End: t0.Add(time.Second), Outcome: OutcomeOK},
		{Job: "lk", Number: 2, Capped: true, CapBytes: 8 * size.GiB, Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), Outcome: OutcomeCapViolation},
		{Job: "lk", Number: 3, Capped: true, WholeGPU: true, CapBytes: 78 * size.GiB, Start: t0.Add(2 * time.Second), End: t0.Add(3 * time.Second), Outcome: OutcomeOK},
	}
	if got, want := Ladder(atts, "lk"), "3GiB+borrow -> 8GiB -> whole GPU"; got != want {
		t.Errorf("Ladder = %q, want %q", got, want)
	}
	if got := atts[0].LimitLabel(); got != "78GiB" {
		t.Errorf("limit of a borrower %q, want 78GiB", got)
	}
	if got := atts[1].LimitLabel(); got != "6GiB" {
		t.Errorf("limit of a job that could not borrow %q, want its cap", got)
	}
	dir := t.TempDir()
	if err := Write(&Result{Attempts: atts}, dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, AttemptsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string) int { return slices.Index(rows[0], name) }
	r := rows[1]
	for name, want := range map[string]string{"cap_bytes": "3221225472", "limit_bytes": "83751862272", "borrowed_at_peak_bytes": "2147483648",
		"borrow_wait_s": "1.500", "next": atts[0].Next, "outcome": "cap-violation", "guarantee_wait_s": "2.500"} {
		if i := col(name); i < 0 || r[i] != want {
			t.Errorf("attempts.csv column %s = %v, want %q (header %v)", name, i, want, rows[0])
		}
	}
}

// A results directory that cannot take a run's outputs (a full disk: the temp file each output
// is written through links to /dev/full) keeps what it held, the earlier run's files whole and
// no partial file beside them, and the error says which file and why. Written in place, the
// earlier file was cut short instead: a results.json that no longer reads.
func TestWriteOnAFullDiskKeepsTheEarlierOutputs(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to stand in for a full disk")
	}
	earlier := &Result{Attempts: []Attempt{{Job: "a", Number: 1, Outcome: OutcomeOK}}, Jobs: []JobResult{{Name: "a", Outcome: OutcomeOK}}}
	later := &Result{Attempts: []Attempt{{Job: "b", Number: 1, Outcome: OutcomeOK}}, Jobs: []JobResult{{Name: "b", Outcome: OutcomeOK}}}
	for _, full := range []string{ResultsFile, AttemptsFile} {
		t.Run(full, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(earlier, dir); err != nil {
				t.Fatal(err)
			}
			read := func() map[string]string {
				got := map[string]string{}
				for _, name := range []string{ResultsFile, AttemptsFile} {
					b, err := os.ReadFile(filepath.Join(dir, name))
					if err != nil {
						t.Fatal(err)
					}
					got[name] = string(b)
				}
				return got
			}
			before := read()
			if err := os.Symlink("/dev/full", filepath.Join(dir, full+".tmp")); err != nil {
				t.Fatal(err)
			}
			err := Write(later, dir)
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, full)) {
				t.Fatalf("Write on a full disk: %v; want ENOSPC naming %s", err, full)
			}
			if after := read(); !maps.Equal(after, before) {
				t.Errorf("the earlier outputs changed:\nbefore %q\nafter  %q", before, after)
			}
			for _, name := range []string{ResultsFile, AttemptsFile} {
				if _, err := os.Lstat(filepath.Join(dir, name+".tmp")); !os.IsNotExist(err) {
					t.Errorf("the temp file of %s is left behind (%v)", name, err)
				}
			}
		})
	}
}
