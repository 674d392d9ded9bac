package policy

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

func TestLadderNext(t *testing.T) {
	p := Default()
	whole := 78 * size.GiB
	base := Failure{Attempt: 1, MaxAttempts: 3, CapBytes: 8 * size.GiB, ReachedBytes: 9 * size.GiB, WholeBytes: whole, UnitBytes: size.GiB}
	with := func(f func(*Failure)) Failure { c := base; f(&c); return c }
	raised := roundUp(p.Cap(9*size.GiB), size.GiB)
	tests := []struct {
		name string
		f    Failure
		kind string
		cap  size.Bytes
		why  string
	}{
		{"reached past the cap: the cap formula over it", base, StepRaise, raised, "cap = 9GiB x"},
		{"reached nothing more: one unit more", with(func(f *Failure) { f.ReachedBytes = size.GiB }), StepRaise, 9 * size.GiB, ""},
		{"a declared cap is raised like any", with(func(f *Failure) { f.CapBytes = 20 * size.GiB; f.ReachedBytes = 20 * size.GiB }), StepRaise, roundUp(p.Cap(20*size.GiB), size.GiB), ""},
		{"too big to share: alone", with(func(f *Failure) { f.ReachedBytes = 70 * size.GiB }), StepAlone, whole, "does not fit beside others"},
		{"the last attempt: alone", with(func(f *Failure) { f.Attempt = 2 }), StepAlone, whole, "last attempt"},
		{"bound of 1: stop", with(func(f *Failure) { f.MaxAttempts = 1 }), StepExhausted, 0, "1 of 1 attempts used"},
		{"bound reached: stop", with(func(f *Failure) { f.Attempt = 5; f.MaxAttempts = 5 }), StepExhausted, 0, "5 of 5"},
		{"bound of 5 leaves room to raise", with(func(f *Failure) { f.Attempt = 3; f.MaxAttempts = 5 }), StepRaise, raised, ""},
		{"alone already: stop", with(func(f *Failure) { f.Whole = true; f.CapBytes = whole }), StepExhausted, 0, "alone with the whole GPU"},
		{"fixed cap: stop", with(func(f *Failure) { f.Fixed = true }), StepExhausted, 0, "cap_fixed"},
		{"more than a GPU: stop", with(func(f *Failure) { f.ReachedBytes = 90 * size.GiB }), StepExhausted, 0, "more than a whole GPU"},
		{"fixed slots: alone", with(func(f *Failure) { f.NoRaise = true }), StepAlone, whole, "slot"},
		{"default bound", with(func(f *Failure) { f.MaxAttempts = 0; f.Attempt = DefaultMaxAttempts }), StepExhausted, 0, "3 of 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := p.Next(tc.f)
			if s.Kind != tc.kind || s.CapBytes != tc.cap || !strings.Contains(s.Why, tc.why) {
				t.Fatalf("Next(%+v) = %+v, want %s %s (why containing %q)", tc.f, s, tc.kind, tc.cap, tc.why)
			}
			if s.Kind == StepRaise && (s.CapBytes <= tc.f.CapBytes || s.CapBytes%size.GiB != 0) {
				t.Errorf("raise to %s from %s: want strictly more, in whole units", s.CapBytes, tc.f.CapBytes)
			}
			if s.Kind != StepExhausted && (s.Attempt != tc.f.Attempt+1 || !strings.HasPrefix(s.String(), s.Head())) {
				t.Errorf("step %+v: want attempt %d and words that start with its head", s, tc.f.Attempt+1)
			}
		})
	}
}

// Climbing from any start never gives the same room twice and stops within the bound.
func TestLadderConverges(t *testing.T) {
	p := Default()
	whole := 78 * size.GiB
	for _, bound := range []int{1, 2, 3, 5, 20} {
		for _, start := range []size.Bytes{size.GiB, 8 * size.GiB, 40 * size.GiB} {
			f := Failure{Attempt: 1, MaxAttempts: bound, CapBytes: start, WholeBytes: whole, UnitBytes: size.GiB}
			attempts := 1
			for {
				f.ReachedBytes = f.CapBytes + 100*size.MiB // a leaker always wants a little more
				s := p.Next(f)
				if s.Kind == StepExhausted {
					break
				}
				attempts++
				if !f.Whole && s.Kind == StepRaise && s.CapBytes <= f.CapBytes {
					t.Fatalf("bound %d from %s: raised %s -> %s", bound, start, f.CapBytes, s.CapBytes)
				}
				f = Failure{Attempt: s.Attempt, MaxAttempts: bound, CapBytes: s.CapBytes, Whole: s.Kind == StepAlone, WholeBytes: whole, UnitBytes: size.GiB}
			}
			if attempts > bound {
				t.Fatalf("bound %d from %s: %d attempts", bound, start, attempts)
			}
		}
	}
}
