package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
)

// objectStore is what the provider needs from policy's Nomad Variables store: typed reads and
// check-and-set writes. Every write returns the new modify index. cas 0 means "create only if
// absent". Deletes are unconditional and succeed when the object is already gone: destroy means
// "make it gone", and `terraform destroy -refresh=false` after a change made outside Terraform
// must still work.
type objectStore interface {
	GetPolicy(ctx context.Context, namespace, name string) (policy.Policy, uint64, error)
	PutPolicy(ctx context.Context, namespace string, p policy.Policy, cas uint64) (uint64, error)
	DeletePolicy(ctx context.Context, namespace, name string) error
	GetTemplate(ctx context.Context, namespace, name string) (policy.Template, uint64, error)
	PutTemplate(ctx context.Context, namespace string, t policy.Template, cas uint64) (uint64, error)
	DeleteTemplate(ctx context.Context, namespace, name string) error
}

// client is the provider's configured state, handed to resources and data sources.
type client struct {
	store     objectStore
	namespace string // default namespace for objects that name none
}

func (c *client) defaultNamespace() string {
	if c == nil || c.namespace == "" {
		return DefaultNamespace
	}
	return c.namespace
}

// kind is the user-facing name of a stored object, for messages.
type kind struct {
	resource string // "gpufrac_policy"
	path     func(string) string
}

var (
	policyKind   = kind{"gpufrac_policy", policy.PolicyPath}
	templateKind = kind{"gpufrac_template", policy.TemplatePath}
)

// storeError turns a store error into a diagnostic that says what happened and what to do.
// Permission denied is always an error: it must never be mistaken for "the object is gone".
func storeError(diags *diag.Diagnostics, op string, k kind, namespace, name string, err error) {
	where := fmt.Sprintf("Nomad Variable %q in namespace %q", k.path(name), namespace)
	var conflict *policy.ConflictError
	switch {
	case errors.Is(err, policy.ErrPermissionDenied):
		diags.AddError("Permission denied",
			fmt.Sprintf("Could not %s %s %s: permission denied by Nomad ACLs. The token needs a policy with "+
				"path \"gpufrac/*\" { capabilities = [\"read\", \"list\", \"write\", \"destroy\"] } in the variables "+
				"block of namespace %q. (%v)", op, k.resource, where, namespace, err))
	case errors.Is(err, nomadvars.ErrNoVariablesAPI):
		// Said apart from "not found": the object may well be there, behind the right address.
		diags.AddError("No Nomad Variables API at the provider's address",
			fmt.Sprintf("Could not %s %s %s: %v. Terraform state is left as it was; check the provider's address "+
				"(or NOMAD_ADDR).", op, k.resource, where, err))
	case errors.Is(err, policy.ErrNotFound) && !errors.Is(err, policy.ErrPermissionDenied):
		diags.AddError(k.resource+" not found",
			fmt.Sprintf("%s does not exist. Check the name and namespace, or create it with a %s resource. (%v)", where, k.resource, err))
	case errors.Is(err, policy.ErrConflict) && op == "create":
		diags.AddError(k.resource+" already exists",
			fmt.Sprintf("%s already exists, so it was not overwritten. Bring it under Terraform with "+
				"`terraform import %s.<label> %s`, or choose another name. (%v)", where, k.resource, objectID(name, namespace), err))
	case errors.As(err, &conflict) && !conflict.Exists():
		// Nomad answers a checked write of a variable someone else holds a lock on with the
		// same conflict as a missing variable, so both are said: "plan again" alone would loop
		// for as long as the lock is held.
		diags.AddError(k.resource+" changed outside Terraform or locked",
			fmt.Sprintf("Could not %s %s: it was deleted outside Terraform since it was last read, or another holder has "+
				"locked it (a Nomad variable lock: only the lock holder may write or delete it). Run `terraform plan` "+
				"again: a deleted variable is planned for creation; if the plan still shows this change, apply once the "+
				"lock is released. (%v)", op, where, err))
	case errors.Is(err, policy.ErrConflict):
		diags.AddError(k.resource+" changed outside Terraform",
			fmt.Sprintf("Could not %s %s: it was changed or deleted outside Terraform since it was last read "+
				"(check-and-set failed). Run `terraform plan` again to refresh and review the change, then apply. (%v)",
				op, where, err))
	default:
		diags.AddError("Could not "+op+" "+k.resource, fmt.Sprintf("Could not %s %s: %v", op, where, err))
	}
}
