package runner

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// openPTY opens a pseudo-terminal: the run prints its live line only to a terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		t.Skipf("unlocking the pseudo-terminal: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		m.Close()
		t.Skipf("naming the pseudo-terminal: %v", e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("opening the pseudo-terminal: %v", err)
	}
	return m, s
}

// On a terminal the live line says what a borrower uses past its guarantee, as gpufrac status
// does: "using 6GiB, guarantees 3GiB of 78GiB" alone read as a GPU promised less than it held.
func TestLiveLineShowsBorrowedMemory(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	q := queue.Queue{
		Jobs:      []queue.Job{simJob(t, "grower", "g", "--peak", "6GiB", "--ramp", "100ms", "--hold", "1500ms")},
		Templates: map[string]queue.TemplateSpec{"g": {Name: "g", PeakBytes: size.GiB}},
	}
	o := testOptions(t, newSim(t, "H100=80GiB"), record.ArmPacked)
	o.Progress = slave
	res := runAll(t, q, o)
	if a := attemptsOf(res, "grower"); len(a) != 1 || a[0].BorrowedBytes == 0 {
		t.Fatalf("the grower did not borrow: %+v", a)
	}
	slave.Close()
	<-read
	mu.Lock()
	out := screen.String()
	mu.Unlock()
	line := regexp.MustCompile(`GPU0: 1 running, using (\S+), guarantees 3GiB of 78GiB([^\r\n|]*)`)
	shown := false
	for _, m := range line.FindAllStringSubmatch(out, -1) {
		used, err := size.Parse(m[1])
		if err != nil || used <= 3*size.GiB {
			continue
		}
		shown = true
		b := regexp.MustCompile(`^, borrowed (\S+)`).FindStringSubmatch(m[2])
		if b == nil {
			t.Fatalf("live line %q: using %s of a 3GiB guarantee, and no word of what is borrowed", m[0], m[1])
		}
		// Both figures are rounded for the screen: they agree to the hundredth of a GiB.
		if borrowed, err := size.Parse(b[1]); err != nil || max(borrowed, used-3*size.GiB)-min(borrowed, used-3*size.GiB) > size.GiB/100 {
			t.Fatalf("live line %q: borrowed %s, want %s (using less the guarantee)", m[0], b[1], used-3*size.GiB)
		}
	}
	if !shown {
		t.Fatalf("no live line showed the grower past its guarantee:\n%q", out)
	}
}
