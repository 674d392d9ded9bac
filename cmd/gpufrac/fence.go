package main

import (
	"flag"
	"path/filepath"

	"github.com/gpufrac/gpufrac/enforcer"
)

// fenceFlags are the allocation fence's flags of run and probe.
type fenceFlags struct {
	mode, library *string
}

func (f *fenceFlags) register(fs *flag.FlagSet) {
	f.mode = fs.String("fence", string(enforcer.FenceAuto), "allocation fence (LD_PRELOAD libgpufrac-fence.so): auto (on when the library is found), on, or off")
	f.library = fs.String("fence-library", "", "path of libgpufrac-fence.so (default: beside this executable)")
}

// check refuses a bad --fence value as a usage error, before anything starts.
func (f *fenceFlags) check() error {
	if err := enforcer.FenceMode(*f.mode).Check(); err != nil {
		return usagef("--%w", err)
	}
	return nil
}

// resolve decides the fence of a command whose tables live under stateDir.
func (f *fenceFlags) resolve(stateDir string, simulated bool) (enforcer.FenceConfig, string, error) {
	return enforcer.ResolveFence(enforcer.FenceMode(*f.mode), *f.library, filepath.Join(stateDir, "fence"), simulated)
}
