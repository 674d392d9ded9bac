//go:build tools

// Package tools pins the tools that generate the provider's documentation. It is a separate
// module so their dependencies stay out of the main module.
package tools

import (
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)
