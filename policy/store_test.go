package policy_test

import (
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/storetest"
)

// TestFileStoreContract runs the check-and-set contract the Terraform provider relies on against
// the file store; policy/nomadvars runs the same against Nomad Variables.
func TestFileStoreContract(t *testing.T) {
	storetest.Contract(t, func(t *testing.T) policy.Store {
		return policy.NewFileStore(filepath.Join(t.TempDir(), "policy.json"), policy.FileOptions{})
	})
}
