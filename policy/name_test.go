package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestNameRule(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"default", true},
		{"train-7b_v2~x", true},
		{strings.Repeat("x", 64), true},
		{strings.Repeat("x", 65), false},
		{"", false},
		{"gpu.pool", false}, // Nomad Variable paths allow no '.'
		{"a@b", false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
	}
	for _, tc := range tests {
		if got := ValidName(tc.name); got != tc.ok {
			t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
		err := CheckName("template", tc.name)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckName(%q) = %v, want nil", tc.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || fe.Field != "template name" ||
			!strings.Contains(err.Error(), `"`+tc.name+`"`) || !strings.Contains(err.Error(), NameRule) {
			t.Errorf("CheckName(%q) = %v: want a FieldError for \"template name\" quoting the name and the rule", tc.name, err)
		}
		if tc.name == "" {
			continue // a template may leave its policy empty (the default policy)
		}
		// Validate applies the same rule to a template's own name and to the policy it names.
		tpl := Template{Name: tc.name, Policy: tc.name, PeakBytes: 1}
		if err := tpl.Validate(); err == nil || strings.Count(err.Error(), NameRule) != 2 {
			t.Errorf("Template{Name, Policy: %q}.Validate() = %v: want both names refused with the rule", tc.name, err)
		}
	}
}
