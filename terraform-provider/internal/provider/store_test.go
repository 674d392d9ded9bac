package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/gpufrac/gpufrac/policy"
)

// Each store error reads as what happened and what to do about it.
func TestStoreErrorSaysWhatHappened(t *testing.T) {
	path := policy.PolicyPath("main")
	tests := []struct {
		op            string
		err           error
		summary, want string
	}{
		{"create", &policy.ConflictError{Path: path, Current: policy.Meta{ModifyIndex: 9}},
			"gpufrac_policy already exists", "terraform import gpufrac_policy.<label> main@default"},
		{"update", &policy.ConflictError{Path: path, CAS: 4, Current: policy.Meta{ModifyIndex: 9}},
			"gpufrac_policy changed outside Terraform", "Run `terraform plan` again"},
		// Nomad's answer to a checked write of a variable someone else has locked: a conflict
		// with no current version, as for a deleted one.
		{"update", &policy.ConflictError{Path: path, CAS: 4},
			"gpufrac_policy changed outside Terraform or locked", "apply once the lock is released"},
		{"read", fmt.Errorf("read %s: %w", path, policy.ErrPermissionDenied),
			"Permission denied", `capabilities = ["read", "list", "write", "destroy"]`},
	}
	for _, tt := range tests {
		var diags diag.Diagnostics
		storeError(&diags, tt.op, policyKind, "default", "main", tt.err)
		if len(diags) != 1 || diags[0].Summary() != tt.summary || !strings.Contains(diags[0].Detail(), tt.want) {
			t.Errorf("%s, %v: got %v, want %q saying %q", tt.op, tt.err, diags, tt.summary, tt.want)
		}
	}
}

// The store the provider builds takes only Nomad's own "variable not found" for a missing
// object: a 404 from anything else at the address fails every operation, naming the address and
// the path, and is never isNotFound, which would drop a resource from state (Read) or pretend a
// delete was done (Delete).
func TestStoreTakesOnlyNomadsNotFoundForAbsent(t *testing.T) {
	elsewhere := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(elsewhere.Close)
	st, err := newNomadStore(storeConfig{Address: elsewhere.URL, Namespace: "default", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := policy.Default()
	p.Name = "main"
	for name, call := range map[string]func() error{
		"read":   func() error { _, _, err := st.GetPolicy(ctx, "default", "main"); return err },
		"write":  func() error { _, err := st.PutPolicy(ctx, "default", p, 0); return err },
		"delete": func() error { return st.DeletePolicy(ctx, "default", "main") },
	} {
		err := call()
		if err == nil || isNotFound(err) {
			t.Errorf("%s against a server that is not Nomad: %v, want an error that is not \"not found\"", name, err)
			continue
		}
		var diags diag.Diagnostics
		storeError(&diags, name, policyKind, "default", "main", err)
		if len(diags) != 1 || diags[0].Summary() != "No Nomad Variables API at the provider's address" ||
			!strings.Contains(diags[0].Detail(), elsewhere.URL) || !strings.Contains(diags[0].Detail(), "/v1/var/gpufrac/policy/main") {
			t.Errorf("%s: %v, want an error naming the address and the path", name, diags)
		}
	}
}
