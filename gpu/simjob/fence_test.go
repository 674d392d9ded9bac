package simjob

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// fakeFence grants up to capBytes and records what it was told; it refuses the next refuse
// charges whatever they ask.
type fakeFence struct {
	capBytes, used size.Bytes
	refuse, asked  int
}

func (f *fakeFence) Charge(n size.Bytes) bool {
	f.asked++
	if f.refuse > 0 {
		f.refuse--
		return false
	}
	if f.used+n > f.capBytes {
		return false
	}
	f.used += n
	return true
}
func (f *fakeFence) Uncharge(n size.Bytes)                { f.used -= n }
func (f *fakeFence) View() (size.Bytes, size.Bytes, bool) { return f.capBytes, f.used, true }
func (f *fakeFence) Detach()                              {}
func (f *fakeFence) Refusal() (string, time.Duration) {
	return "past its limit", 1500 * time.Millisecond
}

// useFence sets how this test's jobs reach the fence (nil: none) and puts back what the test
// binary had: its external tests link enforcer/fence, which hands over the real one.
func useFence(t *testing.T, a AttachFunc) {
	old := attachFn.Load()
	if a == nil {
		attachFn.Store(nil)
	} else {
		UseFence(a)
	}
	t.Cleanup(func() { attachFn.Store(old) })
}

// A simulated job reaches the fence only through what UseFence handed it, and says why when it
// cannot, as the preload library does; it never stops for it.
func TestAttachFence(t *testing.T) {
	const uuid = "GPU-1"
	fake := &fakeFence{capBytes: size.GiB}
	var asked []string
	attach := func(dir, gpu, token string) (Fence, error) {
		asked = append(asked, dir+" "+gpu+" "+token)
		if token == "bad" {
			return nil, errors.New("no task for this reservation")
		}
		return fake, nil
	}
	tests := []struct {
		name   string
		attach AttachFunc
		env    map[string]string
		fenced bool
		say    string
	}{
		{"no fence directory", attach, map[string]string{taskenv.Reservation: "tok", taskenv.GPUUUID: uuid}, false, ""},
		{"no fence in this program", nil, map[string]string{taskenv.FenceDir: "/f", taskenv.Reservation: "tok", taskenv.GPUUUID: uuid}, false, "no fence for simulated jobs"},
		{"no reservation for this GPU", attach, map[string]string{taskenv.FenceDir: "/f", taskenv.Reservation: "tok", taskenv.GPUUUID: "GPU-2"}, false, "no reservation for GPU-1"},
		{"the fence refuses the attach", attach, map[string]string{taskenv.FenceDir: "/f", taskenv.ReservationKey(uuid): "bad"}, false, "no task for this reservation; this process runs under the watchdog alone"},
		{"attached", attach, map[string]string{taskenv.FenceDir: "/f", taskenv.ReservationKey(uuid): "tok"}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{taskenv.FenceDir, taskenv.Reservation, taskenv.GPUUUID, taskenv.ReservationKey(uuid)} {
				t.Setenv(k, tt.env[k])
			}
			useFence(t, tt.attach)
			var stderr bytes.Buffer
			j := &job{c: &config{gpu: uuid}, stderr: &stderr}
			j.attachFence()
			j.attachFence() // once: the second look says nothing more
			if (j.fence != nil) != tt.fenced {
				t.Fatalf("fenced %v, want %v (stderr %q)", j.fence != nil, tt.fenced, stderr.String())
			}
			if got := stderr.String(); (tt.say == "") != (got == "") || !strings.Contains(got, tt.say) || strings.Count(got, "\n") > 1 {
				t.Fatalf("stderr %q, want one line with %q", got, tt.say)
			}
		})
	}
	if len(asked) != 2 || asked[1] != "/f GPU-1 tok" {
		t.Fatalf("attach was asked %q", asked)
	}
}

// Growth past the context is charged to the fence; a refusal fails the job inside itself.
func TestChargeGoesThroughTheFence(t *testing.T) {
	fake := &fakeFence{capBytes: size.GiB}
	var stderr bytes.Buffer
	j := &job{c: &config{gpu: "GPU-1"}, stderr: &stderr, fence: fake, fenceTried: true, ctx: 500 * size.MiB, ctxSet: true}
	if code := j.charge(1000 * size.MiB); code != ExitOK || fake.used != 500*size.MiB {
		t.Fatalf("within the cap: exit %d, charged %s", code, fake.used)
	}
	j.used = 1000 * size.MiB
	if code := j.charge(2 * size.GiB); code != ExitFail || fake.used != 500*size.MiB {
		t.Fatalf("past the cap: exit %d, charged %s", code, fake.used)
	}
	if !strings.Contains(stderr.String(), "CUDA out of memory") || !strings.Contains(stderr.String(), "past its limit, after 1.5s of waiting") {
		t.Fatalf("a refusal says nothing: %q", stderr.String())
	}
	if code := j.charge(600 * size.MiB); code != ExitOK || fake.used != 100*size.MiB {
		t.Fatalf("a shrink gives back: exit %d, charged %s", code, fake.used)
	}
}

// A job that asks twice (PyTorch's caching allocator frees its cache and asks again) lives
// through one refusal; one that asks once fails at it.
func TestAsksAfterARefusal(t *testing.T) {
	for _, tc := range []struct {
		asks, refuse, wantAsked int
		want                    int
	}{
		{asks: 1, refuse: 1, wantAsked: 1, want: ExitFail},
		{asks: 2, refuse: 1, wantAsked: 2, want: ExitOK},
		{asks: 2, refuse: 2, wantAsked: 2, want: ExitFail},
	} {
		fake := &fakeFence{capBytes: size.GiB, refuse: tc.refuse}
		var stderr bytes.Buffer
		j := &job{c: &config{gpu: "GPU-1", asks: tc.asks}, stderr: &stderr, fence: fake, fenceTried: true, ctx: 500 * size.MiB, ctxSet: true}
		if code := j.charge(600 * size.MiB); code != tc.want || fake.asked != tc.wantAsked {
			t.Errorf("asks %d, %d refused: exit %d after %d asks; want exit %d after %d", tc.asks, tc.refuse, code, fake.asked, tc.want, tc.wantAsked)
		}
	}
}

func TestParseAsks(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want string // error text; "" accepted
	}{{"1", ""}, {"2", ""}, {"0", "--asks 0: want 1 to 8"}, {"9", "--asks 9: want 1 to 8"}} {
		c, err := parse([]string{"--dir", "/d", "--gpu", "GPU-1", "--asks", tc.arg}, io.Discard)
		switch {
		case tc.want == "" && (err != nil || fmt.Sprint(c.asks) != tc.arg):
			t.Errorf("--asks %s: %v", tc.arg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("--asks %s: %v, want an error with %q", tc.arg, err, tc.want)
		}
	}
}
