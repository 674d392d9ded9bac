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
func StoreTemplate(ctx context.Context, st policy.Store, name, polName string, peak size.Bytes, smActive *float64) error {
	t, _, err := st.GetTemplate(ctx, name)
	switch {
	case errors.Is(err, policy.ErrNotFound):
		t = policy.Template{Name: name, Policy: polName, Description: "measured by gpufrac probe"}
	case err != nil:
		return fmt.Errorf("reading template %q: %w", name, err)
	}
	t.PeakBytes = peak
	if smActive != nil {
		t.SMActivePercent = smActive
	}
	if _, err := st.PutTemplateUnchecked(ctx, t); err != nil {
		return fmt.Errorf("storing template %q: %w", name, err)
	}
	return nil
}
