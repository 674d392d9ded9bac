package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// TestSMFieldsEncoding: the SM budget and a template's SM-active share are written only when
// set, read back exactly, and a template never measured reads as unknown, not 0.
func TestSMFieldsEncoding(t *testing.T) {
	p := Default()
	items, err := EncodePolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := items[KeySMBudgetPercent]; ok {
		t.Fatalf("a policy with the budget off wrote %s = %q", KeySMBudgetPercent, items[KeySMBudgetPercent])
	}
	p.SMBudgetPercent = 150
	if items, err = EncodePolicy(p); err != nil || items[KeySMBudgetPercent] != "150" {
		t.Fatalf("budget 150: items %v, %v", items, err)
	}
	if back, err := DecodePolicy(items); err != nil || back != p {
		t.Fatalf("policy round trip: %+v, %v; want %+v", back, err, p)
	}
	items[KeySMBudgetPercent] = "0.5"
	if _, err := DecodePolicy(items); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "sm_budget_percent = 0.5") {
		t.Fatalf("budget 0.5: %v, want an error naming it", err)
	}

	for _, want := range []float64{0, 52.2, 100} {
		tp := Template{Name: "lora", PeakBytes: size.GiB, SMActivePercent: &want}
		items, err := EncodeTemplate(tp)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeTemplate(items)
		if err != nil || back.SMActivePercent == nil || *back.SMActivePercent != want {
			t.Fatalf("SM active %g%%: items %v, read back %+v, %v", want, items, back, err)
		}
	}
	items, err = EncodeTemplate(Template{Name: "lora", PeakBytes: size.GiB})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := items[KeySMActivePercent]; ok {
		t.Fatalf("a template never measured wrote %s", KeySMActivePercent)
	}
	if back, err := DecodeTemplate(items); err != nil || back.SMActivePercent != nil {
		t.Fatalf("a template never measured read back SM active %v, %v; want unknown", back.SMActivePercent, err)
	}
	bad := -3.0
	if _, err := EncodeTemplate(Template{Name: "lora", PeakBytes: 1, SMActivePercent: &bad}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "sm_active_percent = -3") {
		t.Fatalf("SM active -3%%: %v, want an error naming it", err)
	}
}
