package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var (
	_ datasource.DataSourceWithConfigure = &policyDataSource{}
	_ datasource.DataSourceWithConfigure = &templateDataSource{}
)

func lookupAttrs(kindName string, computed map[string]schema.Attribute) map[string]schema.Attribute {
	attrs := map[string]schema.Attribute{
		"name": schema.StringAttribute{
			Required: true, MarkdownDescription: "Name of the " + kindName + ".",
			Validators: []validator.String{nameValidator},
		},
		"namespace": schema.StringAttribute{
			Optional: true, Computed: true,
			MarkdownDescription: "Nomad namespace. Defaults to the provider's `namespace`.",
			Validators:          []validator.String{namespaceValidator},
		},
		"id":           schema.StringAttribute{Computed: true, MarkdownDescription: "`<name>@<namespace>`."},
		"modify_index": schema.Int64Attribute{Computed: true, MarkdownDescription: "The Nomad Variable's modify index."},
	}
	for k, v := range computed {
		attrs[k] = v
	}
	return attrs
}

func str(desc string) schema.StringAttribute {
	return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
}
func i64(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{Computed: true, MarkdownDescription: desc}
}

// --- gpufrac_policy ---

type policyDataSource struct{ client *client }

func newPolicyDataSource() datasource.DataSource { return &policyDataSource{} }

func (d *policyDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_policy"
}

func (d *policyDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads a gpufrac policy (Nomad Variable `gpufrac/policy/<name>`) by name and namespace. Sizes are given in canonical spelling and in bytes.",
		Attributes: lookupAttrs("policy", map[string]schema.Attribute{
			"headroom":           str("Memory kept free on every GPU."),
			"headroom_bytes":     i64("`headroom` in bytes."),
			"cap_margin_percent": schema.Float64Attribute{Computed: true, MarkdownDescription: "Percentage added to a peak to make a cap."},
			"cap_margin":         str("Bytes added to a cap after the percentage."),
			"cap_margin_bytes":   i64("`cap_margin` in bytes."),
			"max_tasks_per_gpu":  i64("Most tasks one GPU holds at once."),
			"unit":               str("Memory behind one Nomad device instance."),
			"unit_bytes":         i64("`unit` in bytes."),
			"mode":               str("`\"mps\"` or `\"isolated\"`."),
			"watchdog_interval":  str("How often the watchdog samples GPU memory use."),
			"unmanaged":          str("`\"report\"` or `\"stop\"`."),
			"sm_budget_percent":  schema.Float64Attribute{Computed: true, MarkdownDescription: "The compute budget of `gpufrac run`, in percent of one GPU's SMs; 0 is off."},
			"sizing": schema.ObjectAttribute{
				Computed: true, AttributeTypes: sizingAttrTypes, MarkdownDescription: sizingDoc,
			},
		}),
	}
}

func (d *policyDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = configuredClient(req.ProviderData, &resp.Diagnostics)
}

func (d *policyDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m policyModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := nsOrDefault(m.Namespace, d.client)
	name := m.Name.ValueString()
	p, idx, err := d.client.store.GetPolicy(ctx, ns, name)
	if err != nil {
		storeError(&resp.Diagnostics, "read", policyKind, ns, name, err)
		return
	}
	m.setFromPolicy(p, ns, idx)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// --- gpufrac_template ---

type templateDataSource struct{ client *client }

func newTemplateDataSource() datasource.DataSource { return &templateDataSource{} }

func (d *templateDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_template"
}

func (d *templateDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads a gpufrac job template (Nomad Variable `gpufrac/templates/<name>`) and computes its cap " +
			"and `units` under the policy it names, as the device plugin does. Use `units` as the `count` of a Nomad job's " +
			"`device \"nvidia/gpumem\"` block. Add `depends_on` on the gpufrac_policy and gpufrac_template resources so the " +
			"read happens after they are written.",
		Attributes: lookupAttrs("template", map[string]schema.Attribute{
			"policy":             str("Name of the policy whose margins and unit size apply."),
			"peak":               str("Measured peak GPU memory of the job."),
			"peak_bytes":         i64("`peak` in bytes."),
			"cap_override":       str("A cap that replaces the computed one, if set."),
			"cap_override_bytes": i64("`cap_override` in bytes."),
			"description":        str("Free text for people."),
			"sm_active_percent":  schema.Float64Attribute{Computed: true, MarkdownDescription: "The share of its run the job kept the SMs active alone (0-100); null when never measured."},
			"cap_bytes":          i64("The memory cap this template needs; a task that requests `units` is given `units x unit_bytes` of the policy."),
			"cap":                str("`cap_bytes` for people, rounded to two decimals."),
			"units":              i64("Memory units a Nomad job of this template must request."),
			"policy_sizing": schema.ObjectAttribute{
				Computed: true, AttributeTypes: sizingAttrTypes,
				MarkdownDescription: "The sizing of the policy read to compute `units` (see gpufrac_policy's `sizing`).",
			},
		}),
	}
}

func (d *templateDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = configuredClient(req.ProviderData, &resp.Diagnostics)
}

func (d *templateDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m templateModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := nsOrDefault(m.Namespace, d.client)
	name := m.Name.ValueString()
	t, idx, err := d.client.store.GetTemplate(ctx, ns, name)
	if err != nil {
		storeError(&resp.Diagnostics, "read", templateKind, ns, name, err)
		return
	}
	m.setFromTemplate(t, ns, idx)
	p, ok := lookupPolicy(ctx, d.client, ns, m.Policy.ValueString(), &resp.Diagnostics)
	if !ok {
		return
	}
	m.setCap(t, p)
	m.PolicySizing = sizingOf(p, ns).object()
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func nsOrDefault(v types.String, c *client) string {
	if known(v) && v.ValueString() != "" {
		return v.ValueString()
	}
	return c.defaultNamespace()
}
