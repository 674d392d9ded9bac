package probe

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Footprint is a measured peak and what it earns under a policy: the cap of the policy's
// formula and the memory units that hold it.
type Footprint struct {
	Peak  size.Bytes
	Cap   size.Bytes
	Units int
}

// Earned is the footprint peak earns under p.
func Earned(p policy.Policy, peak size.Bytes) Footprint {
	c := p.Cap(peak)
	return Footprint{Peak: peak, Cap: c, Units: p.Units(c)}
}

// StoreTemplate makes peak the footprint of the template name in st, with its SM-active share
// alone when one was measured (smActive nil keeps what st holds: a probe on a GPU without a
// performance monitor learns nothing of the SMs). A template st already holds keeps what else it
// says (description, cap override, policy): a person or Terraform wrote those, and a new
// measurement does not make them wrong. One st does not hold is made under the policy polName.
//
// The write is a check-and-set on the version read, so a change someone else (terraform apply,
// another probe) makes between the read and the write is not overwritten: the template is read
// again and the measurement applied to what is there now.
func StoreTemplate(ctx context.Context, st policy.Store, name, polName string, peak size.Bytes, smActive *float64) error {
	const attempts = 5
	var err error
	for range attempts {
		var t policy.Template
		var m policy.Meta
		t, m, err = st.GetTemplate(ctx, name)
		switch {
		case errors.Is(err, policy.ErrNotFound):
			// m.ModifyIndex is 0: create it only if it is still absent.
			t = policy.Template{Name: name, Policy: polName, Description: "measured by gpufrac probe"}
		case err != nil:
			return fmt.Errorf("reading template %q: %w", name, err)
		}
		t.PeakBytes = peak
		if smActive != nil {
			t.SMActivePercent = smActive
		}
		_, err = st.PutTemplate(ctx, t, m.ModifyIndex)
		if !errors.Is(err, policy.ErrConflict) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("storing template %q: %w", name, err)
	}
	return nil
}
