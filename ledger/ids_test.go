package ledger

import "testing"

// FuzzParseInstanceID checks that every ID the parser accepts is the canonical form of what it
// returns, so two different strings can never name the same unit. The seeds run in every test.
func FuzzParseInstanceID(f *testing.F) {
	for _, s := range []string{InstanceID(gpuA, 0), InstanceID(gpuA, 140), "GPU-1", "GPU-01", "GPU--1", "-", "a-b", "x-999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		u, k, err := ParseInstanceID(id)
		if err != nil {
			return
		}
		if k < 0 || u == "" || InstanceID(u, k) != id {
			t.Errorf("ParseInstanceID(%q) = %q, %d; InstanceID gives %q", id, u, k, InstanceID(u, k))
		}
	})
}

func TestRedactToken(t *testing.T) {
	tests := []struct{ token, want string }{
		{"0123456789abcdef0123456789abcdef", "01234567…"},
		{"012345678", "01234567…"},
		{"01234567", "01234567"}, // nothing would be hidden, so nothing is marked as cut
		{"", ""},
	}
	for _, tc := range tests {
		if got := RedactToken(tc.token); got != tc.want {
			t.Errorf("RedactToken(%q) = %q, want %q", tc.token, got, tc.want)
		}
	}
}
