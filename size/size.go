package size

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
)

// Bytes is a count of bytes. It is unsigned because no memory size in gpufrac is negative.
type Bytes uint64

// Common sizes.
const (
	KiB Bytes = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
	PiB
)

// SI sizes.
const (
	KB Bytes = 1000
	MB Bytes = 1000 * KB
	GB Bytes = 1000 * MB
	TB Bytes = 1000 * GB
	PB Bytes = 1000 * TB
)

// ErrSyntax is wrapped by every parse error, so callers can tell bad input from other failures.
var ErrSyntax = errors.New("invalid size")

var units = map[string]Bytes{
	"": 1, "b": 1, "byte": 1, "bytes": 1,
	"k": KB, "kb": KB, "m": MB, "mb": MB, "g": GB, "gb": GB, "t": TB, "tb": TB, "p": PB, "pb": PB,
	"ki": KiB, "kib": KiB, "mi": MiB, "mib": MiB, "gi": GiB, "gib": GiB, "ti": TiB, "tib": TiB, "pi": PiB, "pib": PiB,
}

// Parse reads a size such as "1.5GiB", "16 GB", "512MiB" or a plain byte count "1073741824".
// IEC suffixes (KiB, MiB, GiB, ...) are powers of 1024, SI suffixes (kB, MB, GB, ...) powers of
// 1000; suffixes are case-insensitive. Fractions of a unit round down to whole bytes; a fraction
// of a byte ("1.5", "0.3B") is refused, as it most likely lacks its unit. The error names the
// bad input.
func Parse(s string) (Bytes, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("%w %q: empty", ErrSyntax, s)
	}
	if strings.HasPrefix(in, "-") {
		return 0, fmt.Errorf("%w %q: negative (a size is 0 or more)", ErrSyntax, s)
	}
	i := strings.IndexFunc(in, func(r rune) bool { return !(unicode.IsDigit(r) || r == '.') })
	num, unit := in, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(in[:i]), strings.TrimSpace(in[i:])
	}
	if num == "" {
		return 0, fmt.Errorf("%w %q: no number before the unit", ErrSyntax, s)
	}
	mult, ok := units[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)", ErrSyntax, s, unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("%w %q: %q is not a number", ErrSyntax, s, num)
	}
	if mult == 1 && !r.IsInt() {
		return 0, fmt.Errorf("%w %q: a fraction of a byte (give a unit, e.g. %sGiB, or a whole byte count)", ErrSyntax, s, num)
	}
	r.Mul(r, new(big.Rat).SetUint64(uint64(mult)))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsUint64() {
		return 0, fmt.Errorf("%w %q: larger than %d bytes", ErrSyntax, s, uint64(math.MaxUint64))
	}
	return Bytes(q.Uint64()), nil
}

// MustParse is Parse for constants in code and tests; it panics on bad input.
func MustParse(s string) Bytes {
	b, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return b
}

// String prints the size in the largest IEC unit that keeps it readable, with up to two
// decimals and no trailing zeros: "1.5GiB", "80GiB", "512MiB", "100B".
func (b Bytes) String() string {
	return format(b, []Bytes{PiB, TiB, GiB, MiB, KiB}, []string{"PiB", "TiB", "GiB", "MiB", "KiB"})
}

// A is String after the article it is read with: "a 9GiB", but "an 8GiB", "an 11GiB", "an
// 80GiB" (eight, eleven, eighty are said with a vowel first), for messages that put a size
// where a noun goes.
func (b Bytes) A() string {
	s := b.String()
	whole := strings.TrimLeft(s, "-")
	if i := strings.IndexFunc(whole, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		whole = whole[:i]
	}
	// Digits are said in groups of three: the first group's length is what decides "eleven
	// thousand" against "one hundred and ten".
	vowel := strings.HasPrefix(whole, "8") ||
		len(whole)%3 == 2 && (strings.HasPrefix(whole, "11") || strings.HasPrefix(whole, "18"))
	if vowel && !strings.HasPrefix(s, "-") {
		return "an " + s
	}
	return "a " + s
}

// SI prints the size in SI units: "1.5GB", "16GB".
func (b Bytes) SI() string {
	return format(b, []Bytes{PB, TB, GB, MB, KB}, []string{"PB", "TB", "GB", "MB", "kB"})
}

func format(b Bytes, steps []Bytes, names []string) string {
	for i, step := range steps {
		if b >= step {
			v := float64(b) / float64(step)
			s := strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
			return s + names[i]
		}
	}
	return strconv.FormatUint(uint64(b), 10) + "B"
}

// MarshalText prints the exact byte count, so encoded values round-trip without loss.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(strconv.FormatUint(uint64(b), 10)), nil }

// UnmarshalText accepts anything Parse accepts.
func (b *Bytes) UnmarshalText(t []byte) error {
	v, err := Parse(string(t))
	if err != nil {
		return err
	}
	*b = v
	return nil
}
