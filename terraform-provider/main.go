// Command terraform-provider-gpufrac is the Terraform/OpenTofu provider that writes gpufrac's
// GPU-sharing policy and job templates into Nomad Variables, where the device plugin reads them.
package main

import (
	"context"
	"flag"
	"log"

	fwprovider "github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/gpufrac/gpufrac/terraform-provider/internal/provider"
	"github.com/gpufrac/gpufrac/version"
)

// newProvider is what main serves. Its version is the one the GNUmakefile stamps for every binary
// (-X github.com/gpufrac/gpufrac/version.Version), so the provider cannot drift to a stamp of its
// own that the build never sets.
func newProvider() func() fwprovider.Provider { return provider.New(version.Version) }

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()

	err := providerserver.Serve(context.Background(), newProvider(), providerserver.ServeOpts{
		Address: provider.Address,
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
