package size

import (
	"math"
	"strconv"
	"testing"
)

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1.5GiB", "16 GB", "1073741824", "", "1.2.3", "-1", " 2 gib ", "18446744073709551616", ".5k", "1e9"} {
		f.Add(s, uint64(0))
	}
	f.Add("", uint64(math.MaxUint64))
	f.Add("", uint64(1536*MiB))
	f.Fuzz(func(t *testing.T, s string, n uint64) {
		if b, err := Parse(s); err == nil {
			// A plain byte count of any parse result reads back exactly.
			back, err := Parse(strconv.FormatUint(uint64(b), 10))
			if err != nil || back != b {
				t.Fatalf("Parse(%q) = %d but its byte count reads back as %d, %v", s, b, back, err)
			}
		}

		b := Bytes(n)
		txt, _ := b.MarshalText()
		var back Bytes
		if err := back.UnmarshalText(txt); err != nil || back != b {
			t.Fatalf("text round trip of %d: %d, %v", n, back, err)
		}
		// The human forms are rounded to two decimals of their unit: reading them back lands
		// within half a hundredth of that unit.
		for _, form := range []struct {
			s     string
			steps []Bytes
		}{{b.String(), []Bytes{PiB, TiB, GiB, MiB, KiB}}, {b.SI(), []Bytes{PB, TB, GB, MB, KB}}} {
			got, err := Parse(form.s)
			if err != nil {
				if n > 16000*uint64(PiB) { // "16384PiB" is one past the largest uint64
					continue
				}
				t.Fatalf("Parse(%q) (printed from %d): %v", form.s, n, err)
			}
			step := Bytes(1)
			for _, st := range form.steps {
				if b >= st {
					step = st
					break
				}
			}
			diff := math.Abs(float64(got) - float64(b))
			if diff > float64(step)*0.005+1 {
				t.Fatalf("%d printed as %q reads back as %d (off by %.0f, step %d)", n, form.s, got, diff, step)
			}
		}
	})
}
