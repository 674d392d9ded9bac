package runner

import "testing"

func TestPreloadsKeepTheJobsOwn(t *testing.T) {
	tests := []struct{ fence, own, want string }{
		{"", "", ""},
		{"/f/lib.so", "", "/f/lib.so"},
		{"", "/usr/lib/libjemalloc.so", "/usr/lib/libjemalloc.so"},
		{"/f/lib.so", "/usr/lib/libjemalloc.so", "/f/lib.so:/usr/lib/libjemalloc.so"},
	}
	for _, tt := range tests {
		if got := preloads(tt.fence, tt.own); got != tt.want {
			t.Errorf("preloads(%q, %q) = %q, want %q", tt.fence, tt.own, got, tt.want)
		}
	}
}
