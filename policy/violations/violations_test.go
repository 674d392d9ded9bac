package violations

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	r := Record{AllocID: "0b5c2a1e-7d3f-4c2b-9a8e-1f2e3d4c5b6a", Namespace: "ml", Job: "train", Task: "main/py", Template: "lora", GPU: "GPU-abc",
		Node: "n1", GPUUnits: 78, UnitBytes: size.GiB, CapBytes: 3 * size.GiB, PeakBytes: 5 * size.GiB,
		AskedBytes: 9 * size.GiB, Action: "oom-in-process", Mode: "isolated", CrossedAt: at, ContainedAt: at.Add(time.Second)}
	got, err := Decode(r.Items())
	if err != nil {
		t.Fatal(err)
	}
	if got != r {
		t.Errorf("round trip\n got %+v\nwant %+v", got, r)
	}
	if p := r.Path(); p != PathPrefix+"0b5c2a1e-7d3f-4c2b-9a8e-1f2e3d4c5b6a/main_py-"+"1796119200123" {
		t.Errorf("path %q", p)
	}
	anon := Record{GPU: "GPU-abc", CrossedAt: at}
	if p := anon.Path(); !strings.HasPrefix(p, PathPrefix+"unattributed-abc/task-") {
		t.Errorf("unattributed path %q", p)
	}
}

func TestDecodeNamesTheBadItem(t *testing.T) {
	for _, tc := range []struct{ key, val string }{
		{KeyCapBytes, "3GiB"},
		{KeyAskedBytes, "-5"},
		{KeyGPUUnits, "-1"},
		{KeyCrossedAt, "yesterday"},
	} {
		_, err := Decode(map[string]string{tc.key: tc.val})
		if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.val) {
			t.Errorf("Decode(%s=%q) = %v; want an error naming both", tc.key, tc.val, err)
		}
	}
}
