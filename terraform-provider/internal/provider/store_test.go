package provider

import (
	"fmt"
	"strings"
	"testing"

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
