package probe

import (
	"context"

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
// The write is policy.EditTemplate's check-and-set on the version read, so a change someone
// else (terraform apply, another probe) makes between the read and the write is not
// overwritten: the measurement lands on what is there now.
func StoreTemplate(ctx context.Context, st policy.Store, name, polName string, peak size.Bytes, smActive *float64) error {
	return policy.EditTemplate(ctx, st, name, func(t *policy.Template, exists bool) (bool, error) {
		// The same figures measured again are not written: each write wakes the store's
		// watchers (policy.Store).
		changed := !exists || t.PeakBytes != peak ||
			smActive != nil && (t.SMActivePercent == nil || *t.SMActivePercent != *smActive)
		if !exists {
			t.Policy, t.Description = polName, "measured by gpufrac probe"
		}
		t.PeakBytes = peak
		if smActive != nil {
			t.SMActivePercent = smActive
		}
		return changed, nil
	})
}
