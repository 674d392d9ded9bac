package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/size"
)

// EnvMPSLimit is the MPS per-client pinned device memory limit a CUDA process starts with.
const EnvMPSLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

// ParseMPSLimit reads a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value for GPU uuid. Entries are
// "<device>=<N><K|M|G>", comma separated, binary units; <device> is the GPU's UUID or "0" (a
// task sees one GPU, so index 0 is it). ok is false when no entry applies. An unreadable value is
// an error rather than "no limit": a cap that silently vanishes is what gpufrac exists to prevent.
// The enforcer (reading a task's environment) and simulated jobs (obeying it) share this parser.
func ParseMPSLimit(v, uuid string) (limit size.Bytes, ok bool, err error) {
	if strings.TrimSpace(v) == "" {
		return 0, false, nil
	}
	for _, raw := range strings.Split(v, ",") {
		dev, val, found := strings.Cut(strings.TrimSpace(raw), "=")
		if !found || dev == "" || len(val) < 2 {
			return 0, false, fmt.Errorf("%s entry %q: want <device>=<N>M or <device>=<N>G", EnvMPSLimit, raw)
		}
		var unit size.Bytes
		switch val[len(val)-1] {
		case 'K', 'k':
			unit = size.KiB
		case 'M', 'm':
			unit = size.MiB
		case 'G', 'g':
			unit = size.GiB
		default:
			return 0, false, fmt.Errorf("%s entry %q: the size needs a K, M or G suffix", EnvMPSLimit, raw)
		}
		n, perr := strconv.ParseUint(val[:len(val)-1], 10, 40)
		if perr != nil {
			return 0, false, fmt.Errorf("%s entry %q: %q is not a whole number", EnvMPSLimit, raw, val[:len(val)-1])
		}
		if dev == uuid || dev == "0" {
			limit, ok = size.Bytes(n)*unit, true
		}
	}
	return limit, ok, nil
}
