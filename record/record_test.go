package record

import (
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
