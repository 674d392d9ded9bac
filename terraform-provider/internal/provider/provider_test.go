package provider

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

func TestResolveConfigFallsBackToNomadEnvironment(t *testing.T) {
	env := map[string]string{
		"NOMAD_ADDR": "https://env:4646", "NOMAD_TOKEN": "env-token", "NOMAD_NAMESPACE": "env-ns",
		"NOMAD_REGION": "env-region", "NOMAD_CACERT": "/env/ca.pem",
		"NOMAD_CLIENT_CERT": "/env/cert.pem", "NOMAD_CLIENT_KEY": "/env/key.pem",
	}
	getenv := func(k string) string { return env[k] }
	null := types.StringNull()
	unset := providerModel{Address: null, Token: null, TokenFile: null, Namespace: null, Region: null,
		CAFile: null, CertFile: null, KeyFile: null, Timeout: null}
	fromEnv := storeConfig{Address: "https://env:4646", Token: "env-token", Namespace: "env-ns", Region: "env-region",
		CACert: "/env/ca.pem", ClientCert: "/env/cert.pem", ClientKey: "/env/key.pem", Timeout: defaultRequestTimeout}
	tests := []struct {
		name string
		m    func(providerModel) providerModel
		want func(storeConfig) storeConfig
	}{
		{"all from the environment", func(m providerModel) providerModel { return m },
			func(c storeConfig) storeConfig { return c }},
		{"configuration wins", func(m providerModel) providerModel {
			m.Address, m.Token, m.Namespace = types.StringValue("http://cfg:4646"), types.StringValue("cfg-token"), types.StringValue("cfg-ns")
			m.Region, m.CAFile = types.StringValue("cfg-region"), types.StringValue("/cfg/ca.pem")
			m.CertFile, m.KeyFile, m.Timeout = types.StringValue("/cfg/cert.pem"), types.StringValue("/cfg/key.pem"), types.StringValue("5s")
			return m
		}, func(storeConfig) storeConfig {
			return storeConfig{Address: "http://cfg:4646", Token: "cfg-token", Namespace: "cfg-ns", Region: "cfg-region",
				CACert: "/cfg/ca.pem", ClientCert: "/cfg/cert.pem", ClientKey: "/cfg/key.pem", Timeout: 5 * time.Second}
		}},
		{"a token file beats NOMAD_TOKEN", func(m providerModel) providerModel {
			m.TokenFile = types.StringValue("/run/token")
			return m
		}, func(c storeConfig) storeConfig {
			c.Token, c.TokenFile = "", "/run/token"
			return c
		}},
	}
	for _, tt := range tests {
		if got, want := resolveConfig(tt.m(unset), getenv), tt.want(fromEnv); got != want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, want)
		}
	}
	empty := resolveConfig(unset, func(string) string { return "" })
	if empty.Address != "http://127.0.0.1:4646" || empty.Namespace != DefaultNamespace || empty.Token != "" ||
		empty.Timeout != defaultRequestTimeout {
		t.Errorf("defaults: %+v", empty)
	}
}

func TestStoreConfigNeedsBothCertAndKey(t *testing.T) {
	tests := []struct {
		cert, key string
		wantErr   bool
	}{{"", "", false}, {"/c.pem", "/k.pem", false}, {"/c.pem", "", true}, {"", "/k.pem", true}}
	for _, tt := range tests {
		err := storeConfig{ClientCert: tt.cert, ClientKey: tt.key}.check()
		if (err != nil) != tt.wantErr {
			t.Errorf("cert %q key %q: error %v, want error %v", tt.cert, tt.key, err, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), `cert_file = "`+tt.cert+`"`) {
			t.Errorf("error %q does not name the values", err)
		}
	}
}

func TestNewNomadStoreReportsBadTokenFile(t *testing.T) {
	_, err := newNomadStore(storeConfig{Address: "http://127.0.0.1:1", TokenFile: "/nonexistent/token", Namespace: "default"})
	if err == nil {
		t.Fatal("a missing token file was accepted")
	}
}

// An address that accepts connections and never answers makes a request fail after
// request_timeout, with an error that names the setting.
func TestRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	})
	st, err := newNomadStore(storeConfig{Address: "http://" + ln.Addr().String(), Namespace: "default", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = st.GetPolicy(context.Background(), "default", "main")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "request_timeout 200ms") {
		t.Fatalf("GetPolicy against a silent server: %v, want a deadline error naming request_timeout", err)
	}
}
