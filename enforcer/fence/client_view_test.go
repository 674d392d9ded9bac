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
// process of no task sees the driver's answers.
func TestOneViewOfTheGPU(t *testing.T) {
	k := fencetest.Build(t)
	const v1Max = size.Bytes(0xffffffff) // the 32-bit ABI saturates
	cases := []struct {
		name      string
		cap       size.Bytes
		token     string
		total     size.Bytes
		total1    size.Bytes
		freeAfter size.Bytes // info's free after 1500M allocated
	}{
		{"small cap", size.GiB, tokA, size.GiB, size.GiB, 0}, // borrowing 476M: nothing free
		{"large cap", 10 * size.GiB, tokA, 10 * size.GiB, v1Max, 10*size.GiB - 1500*size.MiB},
		{"no task", size.GiB, "", 80 * size.GiB, v1Max, 80*size.GiB - 1500*size.MiB},
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
				want(t, c.Do("alloc 1500M"), "ok", "alloc")
				want(t, c.Do("info"), fmt.Sprintf("info %d %d", tc.freeAfter, tc.total), "cuMemGetInfo after 1500M")
			})
		}
	}
}
