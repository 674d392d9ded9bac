package simjob

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/size"
)

// EnvMPSLimit is the MPS per-client pinned device memory limit a job honours.
const EnvMPSLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

// EnvCapBytes is the reservation's cap; a simulated job reports it but never obeys it.
const EnvCapBytes = "GPUFRAC_CAP_BYTES"

// ParseMPSLimit reads CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for the job's one visible GPU. Entries are
// "<device>=<N>M" or "<device>=<N>G", comma separated; <device> is the GPU's UUID or "0" (the
// first, here the only, visible device). M is MiB and G is GiB. ok is false when no entry
// applies. An unreadable value is an error rather than "no limit": a cap that silently vanishes
// is the failure this project exists to prevent.
func ParseMPSLimit(v, uuid string) (limit size.Bytes, ok bool, err error) {
	if strings.TrimSpace(v) == "" {
		return 0, false, nil
	}
	for _, raw := range strings.Split(v, ",") {
		e := strings.TrimSpace(raw)
		dev, val, found := strings.Cut(e, "=")
		if !found || dev == "" || len(val) < 2 {
			return 0, false, fmt.Errorf("%s entry %q: want <device>=<N>M or <device>=<N>G", EnvMPSLimit, raw)
		}
		var unit size.Bytes
		switch val[len(val)-1] {
		case 'M', 'm':
			unit = size.MiB
		case 'G', 'g':
			unit = size.GiB
		default:
			return 0, false, fmt.Errorf("%s entry %q: the size needs an M or G suffix", EnvMPSLimit, raw)
		}
		n, perr := strconv.ParseUint(val[:len(val)-1], 10, 32)
		if perr != nil {
			return 0, false, fmt.Errorf("%s entry %q: %q is not a whole number", EnvMPSLimit, raw, val[:len(val)-1])
		}
		if dev == uuid || dev == "0" {
			limit, ok = size.Bytes(n)*unit, true
		}
	}
	return limit, ok, nil
}
