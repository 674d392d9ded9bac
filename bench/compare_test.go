package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func res(tpl, kind, values string) Result {
	return Result{Template: tpl, Kind: kind, Values: []byte(values)}
}

func TestCompare(t *testing.T) {
	losses := "[12.0, 11.5, 11.0, 10.5, 10.0, 9.5, 9.0]"
	// mean of the last 5 is 10.0; 10.0 * 5e-4 = 0.005 spread over one value gives 0.025.
	near := "[12.0, 11.5, 11.0, 10.5, 10.0, 9.5, 9.025]"
	far := "[12.0, 11.5, 11.0, 10.5, 10.0, 9.5, 9.2]"
	cases := []struct {
		name    string
		ref     Result
		got     Result
		wantErr string
	}{
		{"exact identical", res(Eval17B, KindExact, "[-1.5, -2.25]"), res(Eval17B, KindExact, "[-1.5, -2.25]"), ""},
		{"exact identical, other spacing", res(Gen17B, KindExact, "[[1,2],[3,4]]"), res(Gen17B, KindExact, "[ [1, 2], [3, 4] ]"), ""},
		{"exact one value differs", res(Eval17B, KindExact, "[-1.5, -2.25]"), res(Eval17B, KindExact, "[-1.5, -2.2500001]"), "not identical"},
		{"exact digest differs", res(Embed06B, KindExact, `["aa","bb"]`), res(Embed06B, KindExact, `["aa","bc"]`), "not identical"},
		{"losses identical", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, losses), ""},
		{"losses within tolerance", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, near), ""},
		{"losses outside tolerance", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, far), "relative difference"},
		{"losses fewer steps", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, "[10.5, 10.0, 9.5, 9.0]"), "4 losses"},
		{"losses not finite", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, "[1, 2, 3, 4, 1e400]"), "not a list"},
		{"kind differs", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindExact, losses), "kind"},
		{"template differs", res(LoRA06B, KindLosses, losses), res(LoRA17B, KindLosses, losses), "template"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Compare(c.ref, c.got)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("want a match, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("want an error containing %q, got %v", c.wantErr, err)
			}
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("error %v does not wrap ErrMismatch", err)
			}
		})
	}
}

// The tolerance is checked at its edge both ways, so a changed constant or formula shows up.
func TestLossToleranceEdge(t *testing.T) {
	mk := func(last float64) Result {
		return res(ResNet50, KindLosses, "[1, 1, 1, 1, "+strconv.FormatFloat(last, 'g', -1, 64)+"]")
	}
	ref := mk(1) // mean 1
	// Moving one of five values by d moves the mean by d/5.
	inside := 1 + 5*LossRelTol*0.99
	outside := 1 + 5*LossRelTol*1.01
	if err := Compare(ref, mk(inside)); err != nil {
		t.Fatalf("just inside the tolerance: %v", err)
	}
	if err := Compare(ref, mk(outside)); err == nil {
		t.Fatal("just outside the tolerance: accepted")
	}
}

func TestCompareFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ref := write("ref.json", `{"template":"eval-1.7b","kind":"exact","values":[1,2],"meta":{"total_s":9}}`)
	same := write("same.json", `{"template":"eval-1.7b","kind":"exact","values":[1,2],"meta":{"total_s":12}}`)
	bad := write("bad.json", `{"template":"eval-1.7b","kind":"exact","values":[1,3]}`)
	broken := write("broken.json", `{"template":"eval-1.7b","kind":`)
	nokind := write("nokind.json", `{"template":"eval-1.7b","values":[1,2]}`)
	novalues := write("novalues.json", `{"template":"eval-1.7b","kind":"exact"}`)
	missing := filepath.Join(dir, "missing.json")

	if err := CompareFiles(ref, same); err != nil {
		t.Fatalf("same values, other meta: %v", err)
	}
	for name, p := range map[string]string{"different": bad, "broken": broken, "no kind": nokind, "no values": novalues, "missing": missing} {
		err := CompareFiles(ref, p)
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("%s: want ErrMismatch, got %v", name, err)
		}
	}
	if err := CompareFiles(missing, same); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "no exclusive reference") {
		t.Fatalf("missing reference: %v", err)
	}
}
