package provider

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/function"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"
)

// Address is the provider's registry address.
const Address = "registry.terraform.io/hashicorp/gpufrac"

var (
	_ provider.Provider              = &gpufracProvider{}
	_ provider.ProviderWithFunctions = &gpufracProvider{}
)

type gpufracProvider struct {
	version string
	// newStore builds the store from the resolved configuration; tests replace it.
	newStore func(storeConfig) (objectStore, error)
}

// New returns a constructor of the provider, as providerserver wants.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &gpufracProvider{version: version, newStore: newNomadStore}
	}
}

type providerModel struct {
	Address   types.String `tfsdk:"address"`
	Token     types.String `tfsdk:"token"`
	TokenFile types.String `tfsdk:"token_file"`
	Namespace types.String `tfsdk:"namespace"`
	Region    types.String `tfsdk:"region"`
	CAFile    types.String `tfsdk:"ca_file"`
	CertFile  types.String `tfsdk:"cert_file"`
	KeyFile   types.String `tfsdk:"key_file"`
	Timeout   types.String `tfsdk:"request_timeout"`
}

// defaultRequestTimeout bounds each request to Nomad when request_timeout is not set: long
// enough for a busy server across regions, short enough that a plan against an address that
// never answers fails instead of hanging.
const defaultRequestTimeout = 30 * time.Second

// storeConfig is the provider configuration after environment fallbacks.
type storeConfig struct {
	Address, Token, TokenFile, Namespace, Region, CACert, ClientCert, ClientKey string
	// Timeout bounds each request to Nomad.
	Timeout time.Duration
}

func (p *gpufracProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "gpufrac"
	resp.Version = p.version
}

func (p *gpufracProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Declares gpufrac's GPU-sharing policy and job templates as Nomad Variables " +
			"(under `gpufrac/`), where the gpufrac Nomad device plugin reads them. Every attribute falls back " +
			"to the usual Nomad environment variable when it is not set.",
		Attributes: map[string]schema.Attribute{
			"address": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Nomad HTTP API address, scheme and host (a path is refused: the Nomad API client sends every request to the host's root). Falls back to `NOMAD_ADDR`, then `http://127.0.0.1:4646`.",
			},
			"token": schema.StringAttribute{
				Optional:            true,
				Sensitive:           true,
				MarkdownDescription: "Nomad ACL token secret ID. Falls back to `NOMAD_TOKEN`. Needs `read`, `list`, `write` and `destroy` on variables path `gpufrac/*`. Conflicts with `token_file`.",
				Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("token_file"))},
			},
			"token_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "File holding the Nomad ACL token (surrounding white space is ignored). Conflicts with `token`.",
			},
			"namespace": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Default Nomad namespace for objects that set none. Falls back to `NOMAD_NAMESPACE`, then `default`.",
			},
			"region": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Nomad region. Falls back to `NOMAD_REGION`.",
			},
			"ca_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "PEM file of the CA that signed Nomad's TLS certificate. Falls back to `NOMAD_CACERT`.",
			},
			"cert_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "PEM file of the client certificate for mutual TLS (Nomad's `verify_https_client`). Falls back to `NOMAD_CLIENT_CERT`. Needs `key_file`.",
			},
			"key_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "PEM file of the private key of `cert_file`. Falls back to `NOMAD_CLIENT_KEY`. Needs `cert_file`.",
			},
			"request_timeout": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How long one request to Nomad may take before the plan or apply fails, a duration such as `\"10s\"`. " +
					"Default `\"" + defaultRequestTimeout.String() + "\"`.",
				Validators: []validator.String{timeoutValidator},
			},
		},
	}
}

// resolveConfig applies the environment fallbacks: configuration first, then NOMAD_* variables.
func resolveConfig(m providerModel, getenv func(string) string) storeConfig {
	pick := func(v types.String, env string) string {
		if !v.IsNull() && !v.IsUnknown() && v.ValueString() != "" {
			return v.ValueString()
		}
		return getenv(env)
	}
	c := storeConfig{
		Address:    pick(m.Address, "NOMAD_ADDR"),
		Namespace:  pick(m.Namespace, "NOMAD_NAMESPACE"),
		Region:     pick(m.Region, "NOMAD_REGION"),
		CACert:     pick(m.CAFile, "NOMAD_CACERT"),
		ClientCert: pick(m.CertFile, "NOMAD_CLIENT_CERT"),
		ClientKey:  pick(m.KeyFile, "NOMAD_CLIENT_KEY"),
		TokenFile:  m.TokenFile.ValueString(),
		Timeout:    defaultRequestTimeout,
	}
	if known(m.Timeout) {
		if d, err := parseDuration(m.Timeout.ValueString()); err == nil && d > 0 {
			c.Timeout = d
		}
	}
	// A token file in the configuration beats a token in the environment.
	if c.TokenFile == "" {
		c.Token = pick(m.Token, "NOMAD_TOKEN")
	}
	if c.Address == "" {
		c.Address = "http://127.0.0.1:4646"
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	return c
}

// check reports settings that only make sense together.
func (c storeConfig) check() error {
	if (c.ClientCert == "") != (c.ClientKey == "") {
		return fmt.Errorf("cert_file = %q and key_file = %q (or NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY): mutual TLS needs "+
			"both the certificate and its key; set both or neither", c.ClientCert, c.ClientKey)
	}
	return nil
}

func (p *gpufracProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for _, a := range []struct {
		v    types.String
		name string
	}{{m.Address, "address"}, {m.Token, "token"}, {m.TokenFile, "token_file"}, {m.Namespace, "namespace"}, {m.Region, "region"}, {m.CAFile, "ca_file"},
		{m.CertFile, "cert_file"}, {m.KeyFile, "key_file"}, {m.Timeout, "request_timeout"}} {
		if a.v.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(a.name), "Unknown provider configuration",
				"The gpufrac provider's "+a.name+" depends on a value known only after apply. Set it from a "+
					"variable or a value known at plan time, or apply the resource it depends on first (-target).")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	cfg := resolveConfig(m, os.Getenv)
	if err := cfg.check(); err != nil {
		resp.Diagnostics.AddError("Incomplete client certificate", err.Error())
		return
	}
	// The token is never logged; only whether one is set.
	tflog.Debug(ctx, "configuring gpufrac provider", map[string]any{
		"address": cfg.Address, "namespace": cfg.Namespace, "region": cfg.Region,
		"token_set": cfg.Token != "", "token_file": cfg.TokenFile, "ca_file": cfg.CACert,
		"cert_file": cfg.ClientCert, "key_file": cfg.ClientKey, "request_timeout": cfg.Timeout.String(),
	})
	st, err := p.newStore(cfg)
	if err != nil {
		resp.Diagnostics.AddError("Could not configure the gpufrac provider",
			"Could not create a Nomad client for "+cfg.Address+": "+err.Error())
		return
	}
	c := &client{store: st, namespace: cfg.Namespace}
	resp.ResourceData = c
	resp.DataSourceData = c
}

func (p *gpufracProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newPolicyResource, newTemplateResource}
}

func (p *gpufracProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newPolicyDataSource, newTemplateDataSource}
}

func (p *gpufracProvider) Functions(context.Context) []func() function.Function {
	return []func() function.Function{newUnitsFunction}
}

// timeoutValidator reports a request_timeout that is not a positive duration.
var timeoutValidator = stringCheck{desc: "value must be a positive duration such as \"10s\" or \"2m\"", title: "Invalid request_timeout",
	wrong: func(_ path.Path, s string) string {
		d, err := parseDuration(s)
		if err == nil && d <= 0 {
			return fmt.Sprintf("request_timeout = %q: must be more than 0", s)
		}
		return errText(err)
	}}
