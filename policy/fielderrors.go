package policy

// validateFieldKeys maps the field names Validate uses to the item keys (and Terraform
// attribute names), so decode and encode errors name what the user actually wrote.
var validateFieldKeys = map[string]string{
	"unit":       KeyUnitBytes,
	"headroom":   KeyHeadroomBytes,
	"cap_margin": KeyCapMarginBytes,
	"peak":       KeyPeakBytes,
}

// FieldErrors flattens err (joined or wrapped) into its *FieldError parts, so a caller such as
// the Terraform provider can attach each to its attribute. Field is the item key where there
// is one.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// withItemKeys renames Validate's field names to item keys in place; Validate builds fresh
// errors on every call, so nobody else holds them.
func withItemKeys(err error) error {
	for _, fe := range FieldErrors(err) {
		if k, ok := validateFieldKeys[fe.Field]; ok {
			fe.Field = k
		}
	}
	return err
}
