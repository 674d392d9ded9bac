package ledger

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// ValidText replaces what is not UTF-8 as the ledger file does (encoding/json, U+FFFD for each
// bad byte), so that a name held in memory is the name read back after a restart.
func TestValidTextIsWhatTheFileKeeps(t *testing.T) {
	for _, s := range []string{"train", "tr\xffain", "ma\xc3in", "\xfe\xfe", "é\xe9", "\uFFFD", ""} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := ValidText(s); got != back {
			t.Errorf("ValidText(%q) = %q, the ledger file keeps %q", s, got, back)
		}
	}
}

// A task's label, which the stats Nomad reads carry, is UTF-8 whatever its allocation ID (the
// task's environment gives it): a shortened ID is cut between characters, not inside one.
func TestTaskStringIsUTF8(t *testing.T) {
	for _, id := range []string{"5e1c0a9b-4d2e-4f3a-9b8c-7d6e5f4a3b2c", "aéééééééé", "€€€€€€€€€"} {
		s := Task{JobName: "train", TaskName: "main", AllocID: id}.String()
		if !utf8.ValidString(s) {
			t.Errorf("alloc %q: label %q is not UTF-8", id, s)
		}
	}
	if got, want := (Task{JobName: "train", TaskName: "main", AllocID: "5e1c0a9b-4d2e"}).String(), "train/main (alloc 5e1c0a9b)"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
}
