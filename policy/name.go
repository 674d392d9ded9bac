package policy

import (
	"fmt"
	"regexp"
)

// NameRule says in words which names ValidName accepts, for messages that refuse one.
const NameRule = "1-64 letters, digits, '-', '_' or '~'"

// nameRE is the one copy of the name rule; the package doc says why it allows no '.'.
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_~-]{1,64}$`)

// ValidName reports whether name may name a policy or a template. The plugin's config, the
// Terraform provider and the queue parser check names with it (or CheckName), so a name that one
// part accepts is never refused by another.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// CheckName rejects names that would make a bad path before any request is sent. The error is
// a *FieldError (wrapping ErrInvalid) whose field is "<kind> name" and whose value is the name.
func CheckName(kind, name string) error {
	if !ValidName(name) {
		return &FieldError{Field: kind + " name", Value: fmt.Sprintf("%q", name), Reason: "must be " + NameRule}
	}
	return nil
}
