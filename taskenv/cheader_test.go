package taskenv

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite "+HeaderPath+" from taskenv.go's names (go generate ./taskenv)")

func TestCHeaderIsGenerated(t *testing.T) {
	if *update {
		if err := os.WriteFile(HeaderPath, CHeader(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(HeaderPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := CHeader(); !bytes.Equal(have, want) {
		t.Fatalf("%s differs from taskenv.go's names: run go generate ./taskenv\nhave:\n%s\nwant:\n%s", HeaderPath, have, want)
	}
}

// The library's C must read the names through the header: a name spelled out in a C file
// would drift from this package unseen.
func TestLibraryDoesNotSpellTheNames(t *testing.T) {
	files, err := os.ReadDir("../enforcer/fence/lib")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".c") {
			continue
		}
		src, err := os.ReadFile("../enforcer/fence/lib/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range cNames {
			if bytes.Contains(src, []byte(`"`+n.value)) {
				t.Errorf("lib/%s spells %q: use %s from taskenv.h", f.Name(), n.value, n.macro)
			}
		}
	}
}

func TestReservationKeyAndTokenFor(t *testing.T) {
	const uuid = "GPU-00112233-4455"
	if got, want := ReservationKey(uuid), "GPUFRAC_RESERVATION_GPU_00112233_4455"; got != want {
		t.Fatalf("ReservationKey(%q) = %q, want %q", uuid, got, want)
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"per-GPU key first", map[string]string{ReservationKey(uuid): "a", Reservation: "b", GPUUUID: uuid}, "a"},
		{"single key naming this GPU, any case", map[string]string{Reservation: "b", GPUUUID: strings.ToLower(uuid)}, "b"},
		{"single key naming another GPU", map[string]string{Reservation: "b", GPUUUID: "GPU-other"}, ""},
		{"nothing", map[string]string{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TokenFor(uuid, func(k string) string { return tt.env[k] }); got != tt.want {
				t.Fatalf("TokenFor = %q, want %q", got, tt.want)
			}
		})
	}
}
