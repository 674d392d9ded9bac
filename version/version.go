package version

// Version is overridden at build time: -X github.com/gpufrac/gpufrac/version.Version=v1.2.3.
var Version = "0.1.0-dev"

// Plugin is the version the Nomad device plugin reports: Nomad parses it with go-version, so it
// must stay a plain semantic version even for development builds.
func Plugin() string {
	v := Version
	if len(v) > 0 && v[0] == 'v' {
		v = v[1:]
	}
	return v
}
