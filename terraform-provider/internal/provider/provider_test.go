package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

func TestResolveConfigFallsBackToNomadEnvironment(t *testing.T) {
	env := map[string]string{
		"NOMAD_ADDR": "https://env:4646", "NOMAD_TOKEN": "env-token", "NOMAD_NAMESPACE": "env-ns",
		"NOMAD_REGION": "env-region", "NOMAD_CACERT": "/env/ca.pem",
	}
	getenv := func(k string) string { return env[k] }
	null := types.StringNull()
	tests := []struct {
		name string
		m    providerModel
		want storeConfig
	}{
		{"all from the environment", providerModel{null, null, null, null, null, null},
			storeConfig{Address: "https://env:4646", Token: "env-token", Namespace: "env-ns", Region: "env-region", CACert: "/env/ca.pem"}},
		{"configuration wins", providerModel{
			Address: types.StringValue("http://cfg:4646"), Token: types.StringValue("cfg-token"), TokenFile: null,
			Namespace: types.StringValue("cfg-ns"), Region: types.StringValue("cfg-region"), CAFile: types.StringValue("/cfg/ca.pem"),
		}, storeConfig{Address: "http://cfg:4646", Token: "cfg-token", Namespace: "cfg-ns", Region: "cfg-region", CACert: "/cfg/ca.pem"}},
		{"a token file beats NOMAD_TOKEN", providerModel{null, null, types.StringValue("/run/token"), null, null, null},
			storeConfig{Address: "https://env:4646", TokenFile: "/run/token", Namespace: "env-ns", Region: "env-region", CACert: "/env/ca.pem"}},
	}
	for _, tt := range tests {
		if got := resolveConfig(tt.m, getenv); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
	empty := resolveConfig(providerModel{null, null, null, null, null, null}, func(string) string { return "" })
	if empty.Address != "http://127.0.0.1:4646" || empty.Namespace != DefaultNamespace || empty.Token != "" {
		t.Errorf("defaults: %+v", empty)
	}
}

func TestNewNomadStoreReportsBadTokenFile(t *testing.T) {
	_, err := newNomadStore(storeConfig{Address: "http://127.0.0.1:1", TokenFile: "/nonexistent/token", Namespace: "default"})
	if err == nil {
		t.Fatal("a missing token file was accepted")
	}
}
