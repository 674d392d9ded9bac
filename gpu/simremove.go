package gpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// simRemovedFile, in a simulated GPU's directory, makes that GPU gone: Devices no longer lists
// it and every query about it fails, as on a host whose GPU fell off the bus (XID 79) and NVML
// answers NVML_ERROR_GPU_IS_LOST. It is a file so that every process sharing Dir sees it.
const simRemovedFile = "removed"

// SetRemoved makes GPU uuid disappear for every process sharing Dir (reason says why, for the
// errors its queries return), or come back with removed false: a fault to test what happens to
// the tasks, reservations and units of a GPU that vanishes mid-run.
func (s *Simulated) SetRemoved(uuid string, removed bool, reason string) error {
	return s.setMark(uuid, simRemovedFile, removed, reason, "simulated removal")
}

// lost is the error every query about a removed GPU returns, or nil while it is present.
func (s *Simulated) lost(uuid string) error {
	b, err := os.ReadFile(filepath.Join(s.dir, uuid, simRemovedFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("simulated GPU %s: cannot tell whether it is present: %w", uuid, err)
	}
	return fmt.Errorf("simulated GPU %s is lost (NVML_ERROR_GPU_IS_LOST): %s", uuid, strings.TrimSpace(string(b)))
}
