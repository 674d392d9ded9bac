package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/function"

	"github.com/gpufrac/gpufrac/policy"
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

// computeUnits parses the arguments, validates them with the policy rules and applies the
// policy's formula; each error names the argument at fault.
func computeUnits(peakS, unitS string, pct float64, marginS string) (int64, *function.FuncError) {
	var errs []*function.FuncError
	peak, err := parseSize(peakS)
	if err != nil {
		errs = append(errs, function.NewArgumentFuncError(0, "peak: "+err.Error()))
	}
	unit, err := parseSize(unitS)
	if err != nil {
		errs = append(errs, function.NewArgumentFuncError(1, "unit: "+err.Error()))
	}
	margin, err := parseSize(marginS)
	if err != nil {
		errs = append(errs, function.NewArgumentFuncError(3, "cap_margin: "+err.Error()))
	}
	if ferr := function.ConcatFuncErrors(errs...); ferr != nil {
		return 0, ferr
	}
	p := policy.Default()
	p.UnitBytes, p.CapMarginPercent, p.CapMarginBytes = unit, pct, margin
	t := policy.Template{Name: "units", PeakBytes: peak}
	if err := p.Validate(); err != nil {
		return 0, function.NewFuncError(err.Error())
	}
	if err := t.Validate(); err != nil {
		return 0, function.NewArgumentFuncError(0, err.Error())
	}
	return int64(t.Units(p)), nil
}
