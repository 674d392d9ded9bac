package size

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Bytes
	}{
		{"0", 0},
		{"1073741824", GiB},
		{"18446744073709551615", Bytes(^uint64(0))},
		{"100B", 100},
		{"100 bytes", 100},
		{"1KiB", 1024},
		{"1.5GiB", 1536 * MiB},
		{"80GiB", 80 * GiB},
		{"512MiB", 512 * MiB},
		{"2TiB", 2 * TiB},
		{"1PiB", PiB},
		{"1Gi", GiB},
		{"16GB", 16 * GB},
		{"16 GB", 16 * GB},
		{"1.5GB", 1500 * MB},
		{"1kB", 1000},
		{"1K", 1000},
		{"3TB", 3 * TB},
		{"1PB", PB},
		{"  2 gib  ", 2 * GiB},
		{"2GIB", 2 * GiB},
		{"2gB", 2 * GB},
		{"\t512\tMiB\n", 512 * MiB},
		{"0.5KiB", 512},
		{".5KiB", 512},
		{"2.0", 2},
		{"1.0009KiB", 1024}, // 1024.92 rounds down
		{"0.1GB", 100 * MB},
		{"1.", 1},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Parse(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"GiB", "no number"},
		{"-1GiB", "negative"},
		{"-5", "negative"},
		{" -0.5GB", "negative"},
		{"1.5", "a fraction of a byte (give a unit, e.g. 1.5GiB"},
		{"0.3B", "a fraction of a byte"},
		{"1.2.3", `"1.2.3" is not a number`},
		{"1..5GiB", "is not a number"},
		{"5XB", `unknown unit "XB"`},
		{"5 gigabytes", `unknown unit "gigabytes"`},
		{"1e9", `unknown unit "e9"`},
		{"1,5GiB", `unknown unit ",5GiB"`},
		{"0x10", `unknown unit "x10"`},
		{"18446744073709551616", "larger than"},
		{"16384PiB", "larger than"},
		{"20000PB", "larger than"},
		{".", "is not a number"},
	}
	for _, tc := range tests {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", tc.in)
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) error does not wrap ErrSyntax: %v", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %q, want it to mention %q", tc.in, err, tc.want)
		}
		if tc.in != "" && !strings.Contains(err.Error(), tc.in) {
			t.Errorf("Parse(%q) = %q does not name the input", tc.in, err)
		}
	}
}

func TestMustParse(t *testing.T) {
	if got := MustParse("2GiB"); got != 2*GiB {
		t.Fatalf("MustParse = %d", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustParse(bad) did not panic")
		}
	}()
	MustParse("two")
}

func TestString(t *testing.T) {
	tests := []struct {
		in      Bytes
		iec, si string
	}{
		{0, "0B", "0B"},
		{100, "100B", "100B"},
		{999, "999B", "999B"},
		{1000, "1000B", "1kB"},
		{1023, "1023B", "1.02kB"},
		{KiB, "1KiB", "1.02kB"},
		{1536 * MiB, "1.5GiB", "1.61GB"},
		{80 * GiB, "80GiB", "85.9GB"},
		{512 * MiB, "512MiB", "536.87MB"},
		{16 * GB, "14.9GiB", "16GB"},
		{1500 * MB, "1.4GiB", "1.5GB"},
		{GiB + 1, "1GiB", "1.07GB"},
		{1365 * MiB, "1.33GiB", "1.43GB"},
		{PiB, "1PiB", "1.13PB"},
		{2048 * PiB, "2048PiB", "2305.84PB"},
	}
	for _, tc := range tests {
		if got := tc.in.String(); got != tc.iec {
			t.Errorf("Bytes(%d).String() = %q, want %q", uint64(tc.in), got, tc.iec)
		}
		if got := tc.in.SI(); got != tc.si {
			t.Errorf("Bytes(%d).SI() = %q, want %q", uint64(tc.in), got, tc.si)
		}
	}
}

func TestText(t *testing.T) {
	b := 1536*MiB + 7
	txt, err := b.MarshalText()
	if err != nil || string(txt) != "1610612743" {
		t.Fatalf("MarshalText = %q, %v", txt, err)
	}
	var back Bytes
	if err := back.UnmarshalText(txt); err != nil || back != b {
		t.Fatalf("UnmarshalText = %d, %v", back, err)
	}
	if err := back.UnmarshalText([]byte("2GiB")); err != nil || back != 2*GiB {
		t.Fatalf("UnmarshalText(2GiB) = %d, %v", back, err)
	}
	if err := back.UnmarshalText([]byte("lots")); !errors.Is(err, ErrSyntax) {
		t.Fatalf("UnmarshalText(lots) = %v", err)
	}
}

// A picks the article a size is said with.
func TestArticle(t *testing.T) {
	for _, tc := range []struct {
		b    Bytes
		want string
	}{
		{9 * GiB, "a 9GiB"},
		{8 * GiB, "an 8GiB"},
		{11 * GiB, "an 11GiB"},
		{18 * GiB, "an 18GiB"},
		{80 * GiB, "an 80GiB"},
		{MustParse("8.5GiB"), "an 8.5GiB"},
		{110 * GiB, "a 110GiB"},
		{180 * GiB, "a 180GiB"},
		{512 * MiB, "a 512MiB"},
		{1 * GiB, "a 1GiB"},
		{800 * MiB, "an 800MiB"},
		{0, "a 0B"},
	} {
		if got := tc.b.A(); got != tc.want {
			t.Errorf("%d bytes: %q, want %q", int64(tc.b), got, tc.want)
		}
	}
}
