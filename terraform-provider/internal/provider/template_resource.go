package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpufrac/gpufrac/policy"
)

var (
	_ resource.Resource                   = &templateResource{}
	_ resource.ResourceWithConfigure      = &templateResource{}
	_ resource.ResourceWithImportState    = &templateResource{}
	_ resource.ResourceWithValidateConfig = &templateResource{}
	_ resource.ResourceWithModifyPlan     = &templateResource{}
)

var (
	pathPolicy       = path.Root("policy")
	pathPolicySizing = path.Root("policy_sizing")
	pathCapOverride  = path.Root("cap_override")
)

type templateResource struct{ client *client }

func newTemplateResource() resource.Resource { return &templateResource{} }

func (r *templateResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_template"
}

func optionalSize(desc string) schema.StringAttribute {
	return schema.StringAttribute{
		Optional:            true,
		MarkdownDescription: desc + " A size such as `\"20GiB\"` or `\"7.5GB\"`; spellings of the same byte count are equal.",
		Validators:          []validator.String{sizeValidator},
		PlanModifiers:       []planmodifier.String{sameSize()},
	}
}

func (r *templateResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A gpufrac job template: a kind of job with a measured peak GPU memory footprint, stored as " +
			"the Nomad Variable `gpufrac/templates/<name>`. `units` is the number of memory units a Nomad job of this " +
			"kind must request (`device \"nvidia/gpumem\" { count = units }`), computed from the named policy exactly as " +
			"the device plugin computes the cap it enforces.\n\n" +
			"The policy must exist when the template is created or changed: refer to it (`policy = gpufrac_policy.<label>.name`) " +
			"so Terraform writes the policy first, and pass its sizing (`policy_sizing = gpufrac_policy.<label>.sizing`) so " +
			"`cap_bytes`, `cap` and `units` are right in the plan that changes the policy. Without `policy_sizing` they are " +
			"computed at apply from the stored policy and follow a policy change only on the next refresh.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`<name>@<namespace>`; also the import ID.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Template name: 1-64 letters, digits, `-`, `_` or `~` (no dots). Changing it replaces the template.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"namespace": namespaceAttr(),
			"policy": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "Name of the gpufrac_policy (same namespace) whose margins and unit size apply. Default `\"" + policy.DefaultName + "\"`.",
				Default:             stringdefault.StaticString(policy.DefaultName),
			},
			"peak":         optionalSize("Measured peak GPU memory of the whole job (all its processes), e.g. from `gpufrac probe`. Required unless `cap_override` is set."),
			"peak_bytes":   schema.Int64Attribute{Computed: true, MarkdownDescription: "`peak` in bytes, as stored in Nomad."},
			"cap_override": optionalSize("A cap that replaces the computed one, more than 0 (leave it unset to use the computed cap)."),
			"cap_override_bytes": schema.Int64Attribute{
				Computed: true, MarkdownDescription: "`cap_override` in bytes, as stored in Nomad.",
			},
			// Optional and computed with an empty default: the variable stores no item for an empty
			// description, so a read cannot tell "" from unset, and both must plan nothing after an
			// import.
			"description": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "Free text for people (at most 4096 characters). Default `\"\"`, none: the variable keeps no item for an empty description, so unset and `\"\"` are the same.",
				Default:             stringdefault.StaticString(""),
			},
			"sm_active_percent": schema.Float64Attribute{
				Optional: true,
				MarkdownDescription: "The share of its run (0-100) the job kept the GPU's SMs active alone, as `gpufrac probe` measures it: " +
					"its demand for a policy's `sm_budget_percent`. Unset is unknown, which is not 0. `gpufrac probe` stores it " +
					"(with `peak`) in the template's variable; a value stored there and not in the configuration shows as drift, " +
					"so let the probe own both with `lifecycle { ignore_changes = [peak, sm_active_percent] }`.",
			},
			"cap_bytes": schema.Int64Attribute{
				Computed: true,
				MarkdownDescription: "The memory cap this template needs: `cap_override`, or `peak x (1 + cap_margin_percent/100) + cap_margin` of the policy. " +
					"A task that requests `units` is given `units x unit_bytes` of the policy, the fewest whole units that hold this.",
			},
			"cap":          schema.StringAttribute{Computed: true, MarkdownDescription: "`cap_bytes` for people, rounded to two decimals (e.g. `\"24.5GiB\"`)."},
			"units":        schema.Int64Attribute{Computed: true, MarkdownDescription: "Memory units a Nomad job of this template must request: `ceil(cap_bytes / unit_bytes)` of the policy."},
			"modify_index": modifyIndexAttr(),
			// Computed as well: an import knows no configuration, so only a refresh that reads the
			// sizing from the stored policy can bring state to what a configuration that passes it
			// says. Without that, the first plan after an import would add it, an update that
			// writes nothing.
			"policy_sizing": schema.ObjectAttribute{
				Optional: true, Computed: true, AttributeTypes: sizingAttrTypes,
				MarkdownDescription: "Set it to `gpufrac_policy.<label>.sizing` of the policy named in `policy`. Then `cap_bytes`, " +
					"`cap` and `units` are computed in the plan, so a policy change and the units a job takes from this template " +
					"land in the same plan. Without it they follow a policy change only on the next refresh. Apply fails when " +
					"the policy stored in Nomad no longer has this sizing. Left unset, it is the sizing of the stored policy " +
					"that `cap_bytes`, `cap` and `units` were last computed from. A refresh (and so an import) reads it from " +
					"Nomad, so a configuration that passes the sizing of the stored policy plans nothing after an import.",
			},
		},
	}
}

func (r *templateResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = configuredClient(req.ProviderData, &resp.Diagnostics)
}

func (r *templateResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m templateModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(m.validate()...)
}

func (r *templateResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var m templateModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	planIdentity(ctx, r.client, req.Config, m.Name, &m.Namespace, &m.ID, &resp.Diagnostics)
	m.PeakBytes = bytesOf(m.Peak)
	m.CapOverrideBytes = bytesOf(m.CapOverride)
	var prior *templateModel
	if !req.State.Raw.IsNull() {
		prior = new(templateModel)
		resp.Diagnostics.Append(req.State.Get(ctx, prior)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	configured := sizingConfigured(ctx, req.Config, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if !configured {
		// The cap and units depend only on these inputs and the stored policy, which the refresh
		// before this plan has already read, and policy_sizing records that policy's sizing.
		// When the inputs are unchanged, the refreshed values stand; otherwise they are computed
		// at apply.
		if prior != nil {
			if prior.PeakBytes.Equal(m.PeakBytes) && prior.CapOverrideBytes.Equal(m.CapOverrideBytes) &&
				prior.Policy.Equal(m.Policy) && prior.Namespace.Equal(m.Namespace) {
				m.CapBytes, m.Cap, m.Units, m.PolicySizing = prior.CapBytes, prior.Cap, prior.Units, prior.PolicySizing
			} else {
				m.CapBytes, m.Cap, m.Units = types.Int64Unknown(), types.StringUnknown(), types.Int64Unknown()
				m.PolicySizing = types.ObjectUnknown(sizingAttrTypes)
			}
		}
	} else {
		// The sizing passed in, computed again, is planned as the refreshed value itself: a
		// float64 read from Nomad need not be the very number the policy's state holds (see
		// semEqual), and Terraform accepts the prior value in place of an equal configured one.
		if prior != nil && semEqual(m.PolicySizing, prior.PolicySizing) {
			m.PolicySizing = prior.PolicySizing
		}
		r.planFromSizing(ctx, &m, &resp.Diagnostics)
	}
	if prior != nil {
		// The variable holds the template's own fields: cap_bytes, cap and units are computed from
		// them and the policy, and policy_sizing is not stored at all. A plan that changes only
		// those (a policy changed here or elsewhere) records them in state and writes nothing
		// (see Update): it neither wakes the plugin nor collides with a probe writing the variable.
		settleModifyIndex(&m, prior, func(x *templateModel) *types.Int64 { return &x.ModifyIndex },
			func(planned, prior *templateModel) bool { return planned.storesSameAs(*prior) })
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &m)...)
}

// planFromSizing computes the cap and units from the policy's sizing that the configuration
// passes in, so they are known (and right) in the plan that changes the policy. They stay
// unknown while the sizing, the peak or the override is.
func (r *templateResource) planFromSizing(ctx context.Context, m *templateModel, diags *diag.Diagnostics) {
	m.CapBytes, m.Cap, m.Units = types.Int64Unknown(), types.StringUnknown(), types.Int64Unknown()
	s, ok, d := sizingFrom(ctx, m.PolicySizing)
	diags.Append(d...)
	if !ok || m.Peak.IsUnknown() || m.CapOverride.IsUnknown() || !known(m.Namespace) || !known(m.Policy) {
		return
	}
	if s.Name != m.Policy.ValueString() {
		diags.AddAttributeError(pathPolicySizing, "policy_sizing of another policy",
			fmt.Sprintf("policy = %q, but policy_sizing is the sizing of policy %q: set policy_sizing = gpufrac_policy.<label>.sizing "+
				"of the policy the template names.", m.Policy.ValueString(), s.Name))
		return
	}
	if s.Namespace != m.Namespace.ValueString() {
		diags.AddAttributeError(pathPolicySizing, "policy_sizing of another namespace",
			fmt.Sprintf("The template is in namespace %q, but policy_sizing is the sizing of policy %q in namespace %q: "+
				"a template uses the policy of its own namespace.", m.Namespace.ValueString(), s.Name, s.Namespace))
		return
	}
	t := m.toTemplate()
	if t.Validate() != nil {
		return // ValidateConfig has reported it
	}
	m.setCap(t, s.apply(policy.Default()))
}

// sizingConfigured says whether the configuration passes policy_sizing. The plan cannot say: a
// computed attribute left unset plans its prior value.
func sizingConfigured(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) bool {
	var o types.Object
	diags.Append(config.GetAttribute(ctx, pathPolicySizing, &o)...)
	return !o.IsNull()
}

func (r *templateResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m templateModel
	configured := sizingConfigured(ctx, req.Config, &resp.Diagnostics)
	storePlan(ctx, req.Plan, &resp.State, &resp.Diagnostics, &m, func() {
		r.write(ctx, &m, 0, "create", true, configured, &resp.Diagnostics)
	})
}

func (r *templateResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, prior templateModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	configured := sizingConfigured(ctx, req.Config, &resp.Diagnostics)
	storePlan(ctx, req.Plan, &resp.State, &resp.Diagnostics, &m, func() {
		// ModifyPlan leaves modify_index unknown exactly when the stored fields change.
		put := m.ModifyIndex.IsUnknown()
		r.write(ctx, &m, uint64(prior.ModifyIndex.ValueInt64()), "update", put, configured, &resp.Diagnostics)
	})
}

// write reads the named policy (so a template never points at a policy that is not there),
// stores the template with check-and-set when put is set (else the stored version is cas, which
// the plan left alone) and fills the model. checkSizing is set when the configuration passes
// policy_sizing: the plan's units came from it, so the stored policy must still have it. A
// sizing the plan kept from the last refresh is not checked: those units follow a policy
// change on the next refresh, as the documentation promises.
func (r *templateResource) write(ctx context.Context, m *templateModel, cas uint64, op string, put, checkSizing bool, diags *diag.Diagnostics) {
	t := m.toTemplate()
	if err := t.Validate(); err != nil {
		diags.Append(validationDiags(err, templateModel{})...)
		return
	}
	if d := m.zeroCapOverride(); d.HasError() {
		diags.Append(d...)
		return
	}
	ns := m.Namespace.ValueString()
	p, ok := lookupPolicy(ctx, r.client, ns, t.Policy, diags)
	if !ok {
		return
	}
	if want, ok, d := sizingFrom(ctx, m.PolicySizing); ok && checkSizing {
		if got := sizingOf(p, ns); got != want {
			diags.AddAttributeError(pathPolicySizing, "Policy changed outside Terraform",
				fmt.Sprintf("The plan sized template %q by %s, but Nomad now holds %s, so the planned units would be wrong. "+
					"Run `terraform plan` again to refresh and review the change, then apply.", t.Name, want, got))
			return
		}
	} else {
		diags.Append(d...)
	}
	idx := cas
	if put {
		var err error
		if idx, err = r.client.store.PutTemplate(ctx, ns, t, cas); err != nil {
			storeError(diags, op, templateKind, ns, t.Name, err)
			return
		}
	}
	m.setFromTemplate(t, ns, idx)
	// Values already known in the plan are kept: the plan promised them (see ModifyPlan).
	if m.CapBytes.IsUnknown() || m.Units.IsUnknown() || m.Cap.IsUnknown() {
		m.setCap(t, p)
	}
	if m.PolicySizing.IsUnknown() {
		m.PolicySizing = sizingOf(p, ns).object()
	}
}

func (r *templateResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m templateModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := m.Namespace.ValueString(), m.Name.ValueString()
	t, idx, ok := readStored(ctx, &resp.State, &resp.Diagnostics, templateKind, ns, name, r.client.store.GetTemplate)
	if !ok {
		return
	}
	m.setFromTemplate(t, ns, idx)
	p, _, err := r.client.store.GetPolicy(ctx, ns, m.Policy.ValueString())
	switch {
	case err == nil:
		m.setCap(t, p)
		m.refreshSizing(sizingOf(p, ns))
	case isNotFound(err):
		resp.Diagnostics.AddAttributeWarning(pathPolicy, "Policy not found",
			"Template "+objectID(name, ns)+" names policy "+m.Policy.ValueString()+", which does not exist, so its cap and units "+
				"could not be refreshed. The device plugin cannot size this template until the policy exists.")
		if m.Units.IsNull() { // import: nothing to keep
			m.CapBytes, m.Cap, m.Units = types.Int64Null(), types.StringNull(), types.Int64Null()
		}
	default:
		storeError(&resp.Diagnostics, "read", policyKind, ns, m.Policy.ValueString(), err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *templateResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteStored(ctx, req.State, &resp.Diagnostics, templateKind, r.client.store.DeleteTemplate)
}

func (r *templateResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByID(ctx, r.client, req, resp)
}
