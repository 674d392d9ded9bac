package probe

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestTail(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 250)
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string // what it keeps
		last   string
		oom    bool
	}{
		{"nothing written", 16, nil, "", "", false},
		{"under the bound", 64, []string{"loading\n", "step 1\n"}, "loading\nstep 1\n", "step 1", false},
		{"keeps the last bytes", 8, []string{"0123456789", "ab"}, "456789ab", "456789ab", false},
		{"last line without its newline and blanks", 64, []string{"a\nb  \n\n"}, "a\nb  \n\n", "b", false},
		{"a long last line is cut", 512, []string{"first\n" + long}, "first\n" + long, long[:maxLastLine] + "...", false},
		{"CUDA out of memory", 128, []string{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"},
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", true},
		{"JAX", 128, []string{"RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n"},
			"RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n", "RESOURCE_EXHAUSTED: Out of memory while trying to allocate", true},
		{"an OOM scrolled out of the tail", 7, []string{"out of memory\n", "retry ok\n"}, "try ok\n", "try ok", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tl := NewTail(tc.max)
			for _, w := range tc.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
			}
			if got := tl.String(); got != tc.want {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
			if got := tl.LastLine(); got != tc.last {
				t.Errorf("LastLine() = %q, want %q", got, tc.last)
			}
			if got := tl.OutOfMemory(); got != tc.oom {
				t.Errorf("OutOfMemory() = %v, want %v", got, tc.oom)
			}
		})
	}
}

// A job's stdout and stderr may be written at once (exec copies each in its own goroutine).
func TestTailConcurrentWrites(t *testing.T) {
	t.Parallel()
	tl := NewTail(1 << 10)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(tl, "w%d %d\n", i, j)
			}
		}()
	}
	wg.Wait()
	if got := len(tl.String()); got != 1<<10 {
		t.Fatalf("kept %d bytes, want the bound, %d", got, 1<<10)
	}
}
