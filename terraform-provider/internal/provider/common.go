package provider

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"

	"github.com/gpufrac/gpufrac/policy"
)

// configuredClient takes the provider's data, which is nil before the provider is configured
// (validation runs then) and a *client after.
func configuredClient(data any, diags *diag.Diagnostics) *client {
	if data == nil {
		return nil
	}
	c, ok := data.(*client)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("expected *provider.client, got %T: this is a bug in the gpufrac provider", data))
		return nil
	}
	return c
}

// isNotFound is true only for "no such variable". Permission denied is a different error and
// must never make a resource disappear from state.
func isNotFound(err error) bool {
	return err != nil && errors.Is(err, policy.ErrNotFound) && !errors.Is(err, policy.ErrPermissionDenied)
}

// settleModifyIndex decides the planned modify_index. The framework marks it unknown whenever
// the proposed state differs from the prior one, which includes a size merely spelled another
// way; once plan modifiers have put the prior spellings back, an unchanged object must plan no
// write at all. planned and prior are pointers to the same model type; same says whether
// planned stores what prior does (modelsEqual where every attribute is stored).
func settleModifyIndex[M any](planned, prior *M, index func(*M) *types.Int64, same func(planned, prior *M) bool) {
	*index(planned) = *index(prior)
	if !same(planned, prior) {
		*index(planned) = types.Int64Unknown()
	}
}

// modelsEqual compares two models attribute by attribute with semEqual.
func modelsEqual[M any](a, b *M) bool {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for i := 0; i < va.NumField(); i++ {
		x, ok1 := va.Field(i).Interface().(attr.Value)
		y, ok2 := vb.Field(i).Interface().(attr.Value)
		if !ok1 || !ok2 || !semEqual(x, y) {
			return false
		}
	}
	return true
}

// semEqual is Equal, except that known numbers of type Float64, also inside objects, are
// compared as the float64 the provider uses, as the framework's semantic equality does. A number
// read back from state holds the decimal Terraform wrote ("12.3" at arbitrary precision) while
// one the provider computes holds the float64 nearest to it: Equal calls those different, which
// would plan a write of an unchanged object after every apply.
func semEqual(x, y attr.Value) bool {
	switch a := x.(type) {
	case types.Float64:
		b, ok := y.(types.Float64)
		if !ok || !known(a) || !known(b) {
			return ok && a.Equal(b)
		}
		return a.ValueFloat64() == b.ValueFloat64()
	case types.Object:
		b, ok := y.(types.Object)
		if !ok || !known(a) || !known(b) {
			return ok && a.Equal(b)
		}
		ax, bx := a.Attributes(), b.Attributes()
		if len(ax) != len(bx) {
			return false
		}
		for k, v := range ax {
			if w, ok := bx[k]; !ok || !semEqual(v, w) {
				return false
			}
		}
		return true
	}
	return x.Equal(y)
}

// planIdentity fills a planned object's namespace, the provider's (c's) when the configuration
// sets none, and its id, name@namespace, once both are known.
func planIdentity(ctx context.Context, c *client, config tfsdk.Config, name types.String, ns, id *types.String, diags *diag.Diagnostics) {
	if ns.IsUnknown() && !config.Raw.IsNull() {
		var cfgNS types.String
		diags.Append(config.GetAttribute(ctx, path.Root("namespace"), &cfgNS)...)
		if cfgNS.IsNull() {
			*ns = types.StringValue(c.defaultNamespace())
		}
	}
	if known(name) && known(*ns) {
		*id = types.StringValue(objectID(name.ValueString(), ns.ValueString()))
	}
}

// storePlan is the whole of a resource's Create and Update once Update has its prior state: it
// reads the plan into m (a pointer to the model), lets write store it (write fills m from what
// was stored, or reports why not) and records m as the new state.
func storePlan(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State, diags *diag.Diagnostics, m any, write func()) {
	diags.Append(plan.Get(ctx, m)...)
	if diags.HasError() {
		return
	}
	write()
	if diags.HasError() {
		return
	}
	diags.Append(state.Set(ctx, m)...)
}

// readStored is how a resource's Read fetches the object its state names with get. ok is false
// when Read has nothing more to do: the object is gone (it leaves the state, so the next plan
// creates it again) or the store failed (reported). Only "not found" removes it: permission
// denied must never make an object disappear from state.
func readStored[T any](ctx context.Context, state *tfsdk.State, diags *diag.Diagnostics, k kind, ns, name string,
	get func(ctx context.Context, ns, name string) (T, uint64, error)) (T, uint64, bool) {
	obj, idx, err := get(ctx, ns, name)
	if isNotFound(err) {
		state.RemoveResource(ctx)
		return obj, 0, false
	}
	if err != nil {
		storeError(diags, "read", k, ns, name, err)
		return obj, 0, false
	}
	return obj, idx, true
}

// deleteStored is a resource's Delete: del removes the object the state names. One already
// gone is what Delete wants, so only other errors are reported.
func deleteStored(ctx context.Context, state tfsdk.State, diags *diag.Diagnostics, k kind, del func(ctx context.Context, ns, name string) error) {
	var ns, name types.String
	diags.Append(state.GetAttribute(ctx, path.Root("namespace"), &ns)...)
	diags.Append(state.GetAttribute(ctx, path.Root("name"), &name)...)
	if diags.HasError() {
		return
	}
	if err := del(ctx, ns.ValueString(), name.ValueString()); err != nil && !isNotFound(err) {
		storeError(diags, "delete", k, ns.ValueString(), name.ValueString(), err)
	}
}

// importByID sets name, namespace and id from "name@namespace" (or "name"); Read fills the rest.
func importByID(ctx context.Context, c *client, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	name, ns, err := parseImportID(req.ID, c.defaultNamespace())
	if err != nil {
		resp.Diagnostics.AddError("Invalid import ID", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("namespace"), ns)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), objectID(name, ns))...)
}

// stringCheck is a plan-time check of a string attribute: wrong says what is wrong with a
// configured value, or "" when nothing is, and the error is reported under title ("" means
// "Invalid <attribute>").
type stringCheck struct {
	desc  string
	title string
	wrong func(at path.Path, s string) string
}

var _ validator.String = stringCheck{}

func (c stringCheck) Description(context.Context) string { return c.desc }

func (c stringCheck) MarkdownDescription(context.Context) string { return c.desc }

func (c stringCheck) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if why := c.wrong(req.Path, req.ConfigValue.ValueString()); why != "" {
		title := c.title
		if title == "" {
			title = "Invalid " + req.Path.String()
		}
		resp.Diagnostics.AddAttributeError(req.Path, title, why)
	}
}

// errText is err's text, or "" for no error: what a stringCheck reports of a parser's answer.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var (
	// namespaceValidator checks the shape of a Nomad namespace name.
	namespaceValidator = stringCheck{desc: "value must be a Nomad namespace name: 1-128 letters, digits or '-'", title: "Invalid namespace",
		wrong: func(_ path.Path, s string) string {
			if nsRE.MatchString(s) {
				return ""
			}
			return fmt.Sprintf("namespace = %q: a Nomad namespace name is 1-128 letters, digits or '-'.", s)
		}}
	// nameValidator checks a policy or template name, naming the bad value.
	nameValidator = stringCheck{desc: "value must be " + policy.NameRule,
		wrong: func(at path.Path, s string) string {
			if policy.ValidName(s) {
				return ""
			}
			return fmt.Sprintf("%s = %q: must be %s (it becomes the last segment of a Nomad Variable path, which allows no '.' or '@').", at, s, policy.NameRule)
		}}
)
