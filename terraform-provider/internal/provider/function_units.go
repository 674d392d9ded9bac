package provider

import (
	"context"
	"errors"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/function"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

var _ function.Function = unitsFunction{}

// unitsFunction computes a template's unit count from values known in configuration, so a job
// can take its device count in the same plan that changes the policy.
type unitsFunction struct{}

func newUnitsFunction() function.Function { return unitsFunction{} }

func (unitsFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "units"
}

func (unitsFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "Memory units a job with the given peak needs under a policy",
		MarkdownDescription: "Returns `ceil((peak x (1 + cap_margin_percent/100) + cap_margin) / unit)`: the number of " +
			"`nvidia/gpumem` device instances a Nomad job must request, computed exactly as the gpufrac device plugin " +
			"computes the cap it enforces. Pass a policy's attributes, e.g. " +
			"`provider::gpufrac::units(\"20GiB\", gpufrac_policy.main.unit, gpufrac_policy.main.cap_margin_percent, gpufrac_policy.main.cap_margin)`.",
		Parameters: []function.Parameter{
			function.StringParameter{Name: "peak", MarkdownDescription: "Measured peak GPU memory of the job, e.g. `\"20GiB\"`."},
			function.StringParameter{Name: "unit", MarkdownDescription: "The policy's `unit`, e.g. `\"1GiB\"`."},
			function.Float64Parameter{Name: "cap_margin_percent", MarkdownDescription: "The policy's `cap_margin_percent`, e.g. `15`."},
			function.StringParameter{Name: "cap_margin", MarkdownDescription: "The policy's `cap_margin`, e.g. `\"1.5GB\"`."},
		},
		Return: function.Int64Return{},
	}
}

func (unitsFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var peakS, unitS, marginS string
	var pct float64
	resp.Error = req.Arguments.Get(ctx, &peakS, &unitS, &pct, &marginS)
	if resp.Error != nil {
		return
	}
	n, ferr := computeUnits(peakS, unitS, pct, marginS)
	if ferr != nil {
		resp.Error = ferr
		return
	}
	resp.Error = resp.Result.Set(ctx, n)
}

// unitsArgs are the function's parameters in order. OpenTofu attributes an error that carries no
// argument index to the first argument, so every error must carry the index of its own.
var unitsArgs = []string{"peak", "unit", "cap_margin_percent", "cap_margin"}

// argIndex is the position of a parameter in unitsArgs, or len(unitsArgs) for a field the policy
// checks but the function does not take, so that such an error sorts last.
func argIndex(field string) int {
	if i := slices.Index(unitsArgs, field); i >= 0 {
		return i
	}
	return len(unitsArgs)
}

// computeUnits parses the arguments, validates them with the policy rules and applies the
// policy's formula. Each error names the argument at fault and carries its index; they come in
// argument order because a combined error keeps the first one's index.
func computeUnits(peakS, unitS string, pct float64, marginS string) (int64, *function.FuncError) {
	type argErr struct {
		i    int
		text string
	}
	var errs []argErr
	sizeArg := func(field, s string) size.Bytes {
		b, err := parseSize(s)
		if err != nil {
			errs = append(errs, argErr{argIndex(field), field + ": " + err.Error()})
		}
		return b
	}
	peak, unit, margin := sizeArg("peak", peakS), sizeArg("unit", unitS), sizeArg("cap_margin", marginS)
	p := policy.Default()
	p.UnitBytes, p.CapMarginPercent, p.CapMarginBytes = unit, pct, margin
	t := policy.Template{Name: "units", PeakBytes: peak}
	if len(errs) == 0 {
		err := errors.Join(p.Validate(), t.Validate())
		fes := policy.FieldErrors(err)
		for _, fe := range fes {
			errs = append(errs, argErr{argIndex(fe.Field), fe.Error()})
		}
		if err != nil && len(fes) == 0 {
			errs = append(errs, argErr{len(unitsArgs), err.Error()})
		}
	}
	if len(errs) == 0 {
		return int64(t.Units(p)), nil
	}
	slices.SortStableFunc(errs, func(a, b argErr) int { return a.i - b.i })
	ferrs := make([]*function.FuncError, len(errs))
	for k, e := range errs {
		if e.i < len(unitsArgs) {
			ferrs[k] = function.NewArgumentFuncError(int64(e.i), e.text)
		} else {
			ferrs[k] = function.NewFuncError(e.text)
		}
	}
	return 0, function.ConcatFuncErrors(ferrs...)
}
