package fence_test

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A fenced task sees one GPU: cuDeviceTotalMem (the 64-bit ABI and the 32-bit one, by name and
// through cuGetProcAddress) and cuMemGetInfo both say its guarantee, a borrower included. A
// process that no reservation places (none in its environment or its ancestors') sees the
// allowance it is held to.
func TestOneViewOfTheGPU(t *testing.T) {
	k := fencetest.Build(t)
	const v1Max = size.Bytes(0xffffffff) // the 32-bit ABI saturates
	cases := []struct {
		name      string
		cap       size.Bytes
		token     string
		total     size.Bytes
		total1    size.Bytes
		alloc     string
		freeAfter size.Bytes // info's free after alloc
	}{
		{"small cap", size.GiB, tokA, size.GiB, size.GiB, "1500M", 0}, // borrowing 476M: nothing free
		{"large cap", 10 * size.GiB, tokA, 10 * size.GiB, v1Max, "1500M", 10*size.GiB - 1500*size.MiB},
		{"no task", size.GiB, "", 64 * size.MiB, 64 * size.MiB, "40M", 24 * size.MiB},
	}
	for _, mode := range []struct {
		name string
		args []string
	}{{"runtime", nil}, {"direct", []string{"direct"}}} {
		for _, tc := range cases {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				dir, _ := table(t, 20*size.GiB, fence.Task{Token: tokA, Cap: tc.cap, Limit: 20 * size.GiB})
				c := k.Start(t, k.Env(dir, tc.token), mode.args...)
				want(t, c.Do("total"), fmt.Sprintf("total %d", tc.total), "cuDeviceTotalMem_v2")
				want(t, c.Do("total1"), fmt.Sprintf("total %d", tc.total1), "cuDeviceTotalMem (32-bit)")
				want(t, c.Do("info"), fmt.Sprintf("info %d %d", tc.total, tc.total), "cuMemGetInfo before any allocation")
				want(t, c.Do("alloc "+tc.alloc), "ok", "alloc")
				want(t, c.Do("info"), fmt.Sprintf("info %d %d", tc.freeAfter, tc.total), "cuMemGetInfo after the allocation")
			})
		}
	}
}
