package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/float64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpufrac/gpufrac/policy"
)

var (
	_ resource.Resource                   = &policyResource{}
	_ resource.ResourceWithConfigure      = &policyResource{}
	_ resource.ResourceWithImportState    = &policyResource{}
	_ resource.ResourceWithValidateConfig = &policyResource{}
	_ resource.ResourceWithModifyPlan     = &policyResource{}
)

type policyResource struct{ client *client }

func newPolicyResource() resource.Resource { return &policyResource{} }

func (r *policyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_policy"
}

// sizeAttr is an optional size with a default: the human spelling is kept, equal spellings are
// not a change.
func sizeAttr(desc, def string) schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true, Computed: true,
		MarkdownDescription: desc + " A size such as `\"4GiB\"`, `\"1.5GB\"` or `\"512MiB\"` (IEC units are powers of 1024, SI units powers of 1000); spellings of the same byte count are equal. Default `\"" + def + "\"`.",
		Default:             stringdefault.StaticString(def),
		Validators:          []validator.String{sizeValidator},
		PlanModifiers:       []planmodifier.String{sameSize()},
	}
}

func bytesAttr(of string) schema.Int64Attribute {
	return schema.Int64Attribute{Computed: true, MarkdownDescription: "`" + of + "` in bytes, as stored in Nomad."}
}

func (r *policyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	d := policyDefaults
	resp.Schema = schema.Schema{
		MarkdownDescription: "A gpufrac GPU-sharing policy, stored as the Nomad Variable `gpufrac/policy/<name>`. " +
			"The device plugin reads it to size each GPU's budget (total memory minus `headroom`), the memory unit " +
			"behind one Nomad device instance, the cap formula `cap = peak x (1 + cap_margin_percent/100) + cap_margin`, " +
			"and the enforcement mode. Writes use check-and-set: a policy changed outside Terraform is reported, not overwritten.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`<name>@<namespace>`; also the import ID.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Policy name: 1-64 letters, digits, `-`, `_` or `~` (no dots). The plugin's `policy` setting selects it; templates name it in `policy`. Changing it replaces the policy.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"namespace":      namespaceAttr(),
			"headroom":       sizeAttr("Memory kept free on every GPU for drivers, CUDA contexts and fragmentation.", d.Headroom),
			"headroom_bytes": bytesAttr("headroom"),
			"cap_margin_percent": schema.Float64Attribute{
				Optional: true, Computed: true,
				MarkdownDescription: fmt.Sprintf("Percentage added to a template's measured peak to make its cap (0-1000). Default `%g`.", d.CapMarginPercent),
				Default:             float64default.StaticFloat64(d.CapMarginPercent),
			},
			"cap_margin":       sizeAttr("Bytes added to a template's cap after the percentage.", d.CapMargin),
			"cap_margin_bytes": bytesAttr("cap_margin"),
			"max_tasks_per_gpu": schema.Int64Attribute{
				Optional: true, Computed: true,
				MarkdownDescription: fmt.Sprintf("Most tasks one GPU holds at once (1-64). Default `%d`.", d.MaxTasksPerGPU),
				Default:             int64default.StaticInt64(d.MaxTasksPerGPU),
			},
			"unit":       sizeAttr("Memory behind one Nomad device instance (64MiB-64GiB); a job asks for `count = units`.", d.Unit),
			"unit_bytes": bytesAttr("unit"),
			"mode": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "Enforcement mode of GPUs with no mode of their own: `\"mps\"` (caps bite at allocation time under an MPS daemon) or `\"isolated\"` (separate contexts, the watchdog stops violators after the fact). Default `\"" + d.Mode + "\"`.",
				Default:             stringdefault.StaticString(d.Mode),
			},
			"watchdog_interval": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "How often the watchdog samples GPU memory use, a duration between 5ms and 1m. Default `\"" + d.Watchdog + "\"`.",
				Default:             stringdefault.StaticString(d.Watchdog),
				Validators:          []validator.String{durationValidator},
				PlanModifiers:       []planmodifier.String{sameDuration()},
			},
			"unmanaged": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "What happens to GPU processes that hold no reservation: `\"report\"` (measured, subtracted from the budget, reported) or `\"stop\"` (also stopped). Default `\"" + d.Unmanaged + "\"`.",
				Default:             stringdefault.StaticString(d.Unmanaged),
			},
			// Every item of the policy's encoding is an attribute: one the provider did not
			// model would be invisible as drift and erased by the next update.
			"sm_budget_percent": schema.Float64Attribute{
				Optional: true, Computed: true,
				MarkdownDescription: fmt.Sprintf("The compute budget of `gpufrac run`: the most SM demand (templates' `sm_active_percent`, summed) "+
					"the jobs on one GPU may have at once, in percent of one GPU's SMs; `0` is off, else between 1 and %d. "+
					"The device plugin reads it but does not apply it yet. Default `%g`.", policy.MaxSMBudgetPercent, d.SMBudgetPercent),
				Default: float64default.StaticFloat64(d.SMBudgetPercent),
			},
			"modify_index": modifyIndexAttr(),
			"sizing": schema.ObjectAttribute{
				Computed: true, AttributeTypes: sizingAttrTypes,
				MarkdownDescription: sizingDoc,
			},
		},
	}
}

// namespaceAttr is an optional namespace that defaults to the provider's at plan time and,
// once set, keeps its value: changing the provider's namespace does not move existing objects.
func namespaceAttr() schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true, Computed: true,
		MarkdownDescription: "Nomad namespace. Defaults to the provider's `namespace`. Changing it replaces the object.",
		Validators:          []validator.String{namespaceValidator},
		PlanModifiers: []planmodifier.String{
			stringplanmodifier.UseStateForUnknown(),
			stringplanmodifier.RequiresReplace(),
		},
	}
}

func modifyIndexAttr() schema.Int64Attribute {
	return schema.Int64Attribute{
		Computed:            true,
		MarkdownDescription: "The Nomad Variable's modify index after the last write or refresh; the check-and-set value of the next write.",
	}
}

func (r *policyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = configuredClient(req.ProviderData, &resp.Diagnostics)
}

func (r *policyResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m policyModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(validationDiags(m.toPolicy().Validate(), policyModel{})...)
}

func (r *policyResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var m policyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	planIdentity(ctx, r.client, req.Config, m.Name, &m.Namespace, &m.ID, &resp.Diagnostics)
	m.HeadroomBytes = bytesOf(m.Headroom)
	m.CapMarginBytes = bytesOf(m.CapMargin)
	m.UnitBytes = bytesOf(m.Unit)
	m.Sizing = m.plannedSizing()
	if !req.State.Raw.IsNull() {
		var prior policyModel
		resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
		// The same sizing, computed again, is planned as the prior value itself: a float64
		// computed here need not be the very number state holds (see semEqual).
		if semEqual(m.Sizing, prior.Sizing) {
			m.Sizing = prior.Sizing
		}
		settleModifyIndex(&m, &prior, func(x *policyModel) *types.Int64 { return &x.ModifyIndex }, modelsEqual[policyModel])
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &m)...)
}

func (r *policyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m policyModel
	storePlan(ctx, req.Plan, &resp.State, &resp.Diagnostics, &m, func() { r.write(ctx, &m, 0, "create", &resp.Diagnostics) })
}

func (r *policyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, prior policyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	storePlan(ctx, req.Plan, &resp.State, &resp.Diagnostics, &m, func() {
		r.write(ctx, &m, uint64(prior.ModifyIndex.ValueInt64()), "update", &resp.Diagnostics)
	})
}

// write stores the planned policy with check-and-set and fills the model from what was stored.
func (r *policyResource) write(ctx context.Context, m *policyModel, cas uint64, op string, diags *diag.Diagnostics) {
	p := m.toPolicy()
	if err := p.Validate(); err != nil {
		diags.Append(validationDiags(err, policyModel{})...)
		return
	}
	ns := m.Namespace.ValueString()
	idx, err := r.client.store.PutPolicy(ctx, ns, p, cas)
	if err != nil {
		storeError(diags, op, policyKind, ns, p.Name, err)
		return
	}
	m.setFromPolicy(p, ns, idx)
}

func (r *policyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m policyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := m.Namespace.ValueString()
	p, idx, ok := readStored(ctx, &resp.State, &resp.Diagnostics, policyKind, ns, m.Name.ValueString(), r.client.store.GetPolicy)
	if !ok {
		return
	}
	m.setFromPolicy(p, ns, idx)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *policyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteStored(ctx, req.State, &resp.Diagnostics, policyKind, r.client.store.DeletePolicy)
}

func (r *policyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, r.client, req, resp)
}
