//go:build cgo

package fence_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// The fence's own SHA-256 against FIPS 180-4's examples and against Go's at every length
// around the block and padding boundaries.
func TestTokenHashIsSHA256(t *testing.T) {
	vectors := []struct{ in, want string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		{strings.Repeat("a", 1000000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
	}
	for _, v := range vectors {
		h := fence.TokenHash(v.in)
		if got := hex.EncodeToString(h[:]); got != v.want {
			t.Errorf("sha256 of %d bytes %.8q…: %s, want %s", len(v.in), v.in, got, v.want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(1 + rng.IntN(255)) // tokens are C strings: no NUL inside
		}
		if got, want := fence.TokenHash(string(b)), sha256.Sum256(b); got != want {
			t.Fatalf("%d bytes: %x, want %x", n, got, want)
		}
	}
}

// What tasks read (the control copy, every task's accounting file) holds no token: only its
// hash, which the enforcer turns back into the token for its snapshot.
func TestTableHoldsNoToken(t *testing.T) {
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	c := attach(t, dir, tokA)
	if r := c.Charge(size.MiB); r != fence.Charged {
		t.Fatalf("charge: %v", r)
	}
	control, err := os.ReadFile(fence.ControlPath(dir, fencetest.FakeUUID))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{tokA, tokB} {
		own, err := os.ReadFile(fence.AccountPath(dir, tok, fencetest.FakeUUID))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(tok))
		for name, raw := range map[string][]byte{"the control copy": control, "its accounting file": own} {
			if bytes.Contains(raw, []byte(tok)) || !bytes.Contains(raw, h[:]) {
				t.Fatalf("%s must hold the hash of %s…, never the token", name, tok[:4])
			}
		}
	}
	if u := snap(t, tb, tokA); u.Used != size.MiB || u.Procs != 1 {
		t.Fatalf("the snapshot names the task by its token: %+v", u)
	}
}
