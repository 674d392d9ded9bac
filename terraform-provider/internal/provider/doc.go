// Package provider is the gpufrac Terraform/OpenTofu provider: resources and data sources for
// the GPU-sharing policy and job templates that gpufrac's Nomad device plugin reads from Nomad
// Variables, and a units() function.
package provider
