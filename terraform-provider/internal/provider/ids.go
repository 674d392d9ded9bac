package provider

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gpufrac/gpufrac/policy"
)

// DefaultNamespace is Nomad's namespace when none is configured anywhere.
const DefaultNamespace = "default"

// nsRE is the shape of a Nomad namespace name.
var nsRE = regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`)

// objectID is the resource ID: "name@namespace", the form `terraform import` takes.
func objectID(name, namespace string) string { return name + "@" + namespace }

// parseImportID reads "name@namespace", or "name" alone for the default namespace, and says
// what a good ID looks like when the input is not one.
func parseImportID(id, defaultNS string) (name, namespace string, err error) {
	name, namespace, found := strings.Cut(id, "@")
	if !found {
		namespace = defaultNS
	}
	if name == "" || namespace == "" || strings.Contains(namespace, "@") {
		return "", "", fmt.Errorf("import ID %q is not <name>@<namespace> or <name>: for example \"training@default\"", id)
	}
	if !policy.ValidName(name) {
		return "", "", fmt.Errorf("import ID %q: name %q must be %s", id, name, policy.NameRule)
	}
	if !nsRE.MatchString(namespace) {
		return "", "", fmt.Errorf("import ID %q: namespace %q must be 1-128 letters, digits or '-'", id, namespace)
	}
	return name, namespace, nil
}
