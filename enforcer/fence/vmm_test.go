package fence_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// A handle's memory (cuMemCreate) lives until it is both released and unmapped, and the fence
// holds it charged that long. It gave the bytes back at cuMemRelease, so a task that released
// each handle once mapped (CUDA's own samples do) held every mapped byte uncharged: the fence
// granted past its cap what the watchdog then found, and a hostile task mapped as much as the
// GPU had through the fence. A retained reference holds the memory as a mapping does.
func TestMappedHandleStaysChargedUntilUnmapped(t *testing.T) {
	_, _, tb, c := taskA(t, size.GiB)
	used := func(wantUsed size.Bytes, what string) {
		t.Helper()
		if u := snap(t, tb, tokA); u.Used != wantUsed {
			t.Fatalf("%s: the fence charges %v, want %v: %+v", what, u.Used, wantUsed, u)
		}
	}
	want(t, c.Do("create 600M"), "ok 0", "a handle")
	want(t, c.Do("map 0 600M"), "ok 1", "its mapping")
	want(t, c.Do("free 0"), "ok", "release of the mapped handle")
	used(600*size.MiB, "released, still mapped")
	want(t, c.Do("used"), "used 629145600", "the device holds the mapped memory")
	want(t, c.Do("create 600M"), "err 2", "a handle past the cap beside the mapped one")
	want(t, c.Do("retain 1"), "ok 2", "a retained reference to the mapped handle")
	want(t, c.Do("free 1"), "ok", "unmap")
	used(600*size.MiB, "unmapped, still retained")
	want(t, c.Do("free 2"), "ok", "release of the retained reference")
	used(0, "released and unmapped")
	want(t, c.Do("used"), "used 0", "the device freed it")
	want(t, c.Do("create 600M"), "ok 3", "a handle once the memory is free")
	want(t, c.Do("map 3 600M"), "ok 4", "mapped")
	want(t, c.Do("free 4"), "ok", "unmapped before its release")
	used(600*size.MiB, "unmapped, not released")
	want(t, c.Do("free 3"), "ok", "released")
	used(0, "unmapped and released")
}
