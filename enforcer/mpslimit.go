package enforcer

import (
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/size"
)

// pinnedLimit reads a process's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for GPU uuid: entries
// "<device>=<N><K|M|G>", comma separated, <device> the UUID or "0" (tasks see one GPU). ok is false
// when no entry applies or the value cannot be read: then the driver does not bound the process
// below its GPU budget, and the watchdog treats it as unlimited.
func pinnedLimit(v, uuid string) (size.Bytes, bool) {
	var limit size.Bytes
	ok := false
	for _, e := range strings.Split(v, ",") {
		dev, val, found := strings.Cut(strings.TrimSpace(e), "=")
		if !found || len(val) < 2 || (dev != uuid && dev != "0") {
			continue
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
			return 0, false
		}
		n, err := strconv.ParseUint(val[:len(val)-1], 10, 40)
		if err != nil {
			return 0, false
		}
		limit, ok = size.Bytes(n)*unit, true
	}
	return limit, ok
}
