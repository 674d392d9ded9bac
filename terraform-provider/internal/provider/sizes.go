package provider

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpufrac/gpufrac/size"
)

// Sizes are written the way people write them ("4GiB", "1.5GB") and stored in Nomad as exact
// byte counts. The human form lives in state next to a computed *_bytes twin. Two spellings
// of the same byte count ("1GiB", "1024MiB") are the same value: a plan modifier keeps the
// prior spelling when the new one normalizes to the same bytes, so rewording a size never
// produces a diff (and never wakes the plugin's blocking query with a pointless write).
//
// Semantic equality (basetypes.StringValuableWithSemanticEquals) was not used because the
// framework consults it only after Read/Create/Update, never while planning, so a reworded
// size would still show as an update in the plan.

const sizeExamples = `write a number and a unit, e.g. "4GiB", "1.5GB", "512MiB" or a plain byte count`

// parseSize parses a size and explains how to write one when it fails.
func parseSize(s string) (size.Bytes, error) {
	b, err := size.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, sizeExamples)
	}
	if b > math.MaxInt64 {
		return 0, fmt.Errorf("size %q is %d bytes, more than this provider can hold (%d)", s, uint64(b), int64(math.MaxInt64))
	}
	return b, nil
}

// humanSize writes b the way a person would, exactly: IEC when it reads back to the same byte
// count ("2GiB"), else SI ("1.5GB"), else the plain byte count. size.String rounds to two
// decimals, so its output is only used when it is exact.
func humanSize(b size.Bytes) string {
	for _, s := range []string{b.String(), b.SI()} {
		if v, err := size.Parse(s); err == nil && v == b {
			return s
		}
	}
	return fmt.Sprintf("%d", uint64(b))
}

// parseDuration parses a Go duration and explains how to write one when it fails.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: write a number and a unit, e.g. \"100ms\", \"1s\" or \"250ms\"", s)
	}
	return d, nil
}

// keepSpelling returns prior when it normalizes to the same value as current, so state keeps
// the spelling in the user's configuration; otherwise it returns fresh, the canonical form.
func keepSpelling[T comparable](prior types.String, current T, parse func(string) (T, error), fresh string) types.String {
	if !prior.IsNull() && !prior.IsUnknown() {
		if v, err := parse(prior.ValueString()); err == nil && v == current {
			return prior
		}
	}
	return types.StringValue(fresh)
}

var (
	// sizeValidator reports a size that does not parse, with the reason.
	sizeValidator = stringCheck{desc: "value must be a size such as \"4GiB\", \"1.5GB\" or \"512MiB\"", title: "Invalid size",
		wrong: func(_ path.Path, s string) string {
			_, err := parseSize(s)
			return errText(err)
		}}
	// durationValidator reports a duration that does not parse, with the reason.
	durationValidator = stringCheck{desc: "value must be a duration such as \"100ms\" or \"1s\"", title: "Invalid duration",
		wrong: func(_ path.Path, s string) string {
			_, err := parseDuration(s)
			return errText(err)
		}}
)

// sameValue is a plan modifier that keeps the prior spelling of a size or duration when the
// planned spelling means the same thing. Terraform accepts a planned value equal to the prior
// state even when it differs from the configuration ("functionally equivalent").
type sameValue struct {
	what  string
	equal func(a, b string) bool
}

var _ planmodifier.String = sameValue{}

func sameSize() planmodifier.String {
	return sameValue{what: "size", equal: func(a, b string) bool {
		x, errA := parseSize(a)
		y, errB := parseSize(b)
		return errA == nil && errB == nil && x == y
	}}
}

func sameDuration() planmodifier.String {
	return sameValue{what: "duration", equal: func(a, b string) bool {
		x, errA := parseDuration(a)
		y, errB := parseDuration(b)
		return errA == nil && errB == nil && x == y
	}}
}

func (m sameValue) Description(context.Context) string {
	return "a " + m.what + " written differently but meaning the same (\"1GiB\" and \"1024MiB\") is not a change"
}

func (m sameValue) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (m sameValue) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.StateValue.IsNull() || req.StateValue.IsUnknown() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
		return
	}
	if req.PlanValue.Equal(req.StateValue) {
		return
	}
	if m.equal(req.PlanValue.ValueString(), req.StateValue.ValueString()) {
		resp.PlanValue = req.StateValue
	}
}

// bytesOf is the planned byte count of a planned size: unknown while the size is unknown, null
// when it is null, and unknown when it does not parse (validation has already said why).
func bytesOf(s types.String) types.Int64 {
	switch {
	case s.IsUnknown():
		return types.Int64Unknown()
	case s.IsNull():
		return types.Int64Null()
	}
	b, err := parseSize(s.ValueString())
	if err != nil {
		return types.Int64Unknown()
	}
	return types.Int64Value(int64(b))
}
