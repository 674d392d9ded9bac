package gpu

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

func TestParseMPSLimit(t *testing.T) {
	const u = "GPU-51m00000-aaaa-bbbb-cccc-dddddddddddd"
	tests := []struct {
		in     string
		want   size.Bytes
		wantOK bool
		bad    bool
	}{
		{"", 0, false, false},
		{"0=4G", 4 * size.GiB, true, false},
		{u + "=2048M", 2 * size.GiB, true, false},
		{"GPU-other=1G", 0, false, false},
		{"GPU-other=1G," + u + "=3G", 3 * size.GiB, true, false},
		{"0=4", 0, false, true},
		{"0=xG", 0, false, true},
		{"4G", 0, false, true},
		{"0=4X", 0, false, true},
		{"0=512K", 512 * size.KiB, true, false},
	}
	for _, tc := range tests {
		got, ok, err := ParseMPSLimit(tc.in, u)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("ParseMPSLimit(%q) error %v, want one naming the entry", tc.in, err)
			}
			continue
		}
		if err != nil || ok != tc.wantOK || got != tc.want {
			t.Errorf("ParseMPSLimit(%q) = %s, %v, %v; want %s, %v", tc.in, got, ok, err, tc.want, tc.wantOK)
		}
	}
}
