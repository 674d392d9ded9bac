package fence_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/size"
)

func TestBorrowedIsBoundedByTheLimit(t *testing.T) {
	cases := []struct {
		name              string
		capB, limit, used size.Bytes
		want              size.Bytes
	}{
		{"within the guarantee", 2 * size.GiB, 4 * size.GiB, size.GiB, 0},
		{"borrowing", 2 * size.GiB, 4 * size.GiB, 3 * size.GiB, size.GiB},
		{"a use written past the limit", 2 * size.GiB, 4 * size.GiB, 60 * size.GiB, 2 * size.GiB},
		{"no limit above the guarantee", 2 * size.GiB, 2 * size.GiB, 60 * size.GiB, 0},
		{"a limit written below the guarantee", 2 * size.GiB, size.GiB, 3 * size.GiB, 0},
	}
	for _, tc := range cases {
		u := fence.TaskUse{Cap: tc.capB, Limit: tc.limit, Used: tc.used}
		if got := u.Borrowed(); got != tc.want {
			t.Errorf("%s: borrowed %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A task the enforcer marked (Unseen) borrows no more than it believes: its guarantee, or what
// NVML showed its processes hold where that is more.
func TestBorrowedIsBoundedByTheMark(t *testing.T) {
	u := fence.TaskUse{Cap: 2 * size.GiB, Limit: 8 * size.GiB, Used: 6 * size.GiB}
	for _, tc := range []struct {
		unseen, want size.Bytes
	}{
		{0, 4 * size.GiB},
		{2 * size.GiB, 0},
		{size.GiB, 0}, // a mark below the guarantee is the guarantee
		{3 * size.GiB, size.GiB},
		{7 * size.GiB, 4 * size.GiB},
	} {
		u.Unseen = tc.unseen
		if got := u.Borrowed(); got != tc.want {
			t.Errorf("marked at %s: borrowed %s, want %s", tc.unseen, got, tc.want)
		}
	}
}
