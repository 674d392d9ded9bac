package deviceplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
)

// gpuUUIDShape is the form NVML gives GPU UUIDs (the simulated backend's too): a UUID one
// character short or long is a typo, refused before any GPU is listed.
var gpuUUIDShape = regexp.MustCompile(`^GPU-[0-9a-z]{8}-[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{4}-[0-9a-z]{12}$`)

// gpuRef says why ref is neither a GPU index nor a GPU UUID, or "" when it is one of them.
func gpuRef(ref string) string {
	if gpuUUIDShape.MatchString(ref) {
		return ""
	}
	if n, err := strconv.Atoi(ref); err == nil && n >= 0 && strconv.Itoa(n) == ref {
		return ""
	}
	return "not a GPU index (0, 1, ...) or UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi -L prints it)"
}

// checkPaths refuses, at SetConfig, a state_dir the plugin cannot create or write and a
// policy_file it cannot read: every later part depends on them, and an agent that starts with
// them unusable would only show it as unhealthy units. It also refuses a metrics_addr whose
// host cannot be listened on, which the running plugin could only log. It creates nothing
// (Nomad's validation launches must leave no trace).
func checkPaths(c Config) error {
	var errs []error
	bad := func(key, val, reason string) {
		errs = append(errs, &policy.FieldError{Field: key, Value: strconv.Quote(val), Reason: reason})
	}
	if why := writableDir(c.StateDir); why != "" {
		bad(KeyStateDir, c.StateDir, why)
	}
	if c.Fence {
		// The enforcer makes fence_dir and its siblings (-lib, -caps, -live, -enforcer) beside
		// it, and no task is admitted without them: checked as state_dir is, for the same reason.
		for _, d := range []string{c.FenceDir, fence.LibraryDir(c.FenceDir)} {
			if why := writableDir(d); why != "" {
				bad(KeyFenceDir, c.FenceDir, why)
				break
			}
		}
	}
	if c.PolicyFile != "" {
		fi, err := os.Stat(c.PolicyFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			bad(KeyPolicyFile, c.PolicyFile, "file not found")
		case err != nil:
			bad(KeyPolicyFile, c.PolicyFile, "cannot be read: "+err.Error())
		case fi.IsDir():
			bad(KeyPolicyFile, c.PolicyFile, "is a directory, not a policy file")
		default:
			if f, err := os.Open(c.PolicyFile); err != nil {
				bad(KeyPolicyFile, c.PolicyFile, "cannot be read: "+err.Error())
			} else {
				f.Close()
			}
		}
	}
	if c.MetricsAddr != "" {
		if why := listenable(c.MetricsAddr); why != "" {
			bad(KeyMetricsAddr, c.MetricsAddr, why)
		}
	}
	// The running plugin builds each Nomad client once and never again: one it cannot build
	// (an address with a path, every namespace, a token or CA file it cannot read) would leave
	// the units unhealthy until a restart, or the violations unpublished with a log line. The
	// client is built as it will be, environment fallbacks included; it sends no request.
	targets := map[string]*NomadTarget{KeyViolations: c.Violations}
	if c.Nomad != nil {
		targets[KeyPolicy] = &c.Nomad.NomadTarget
	}
	for _, block := range []string{KeyPolicy, KeyViolations} {
		if t := targets[block]; t != nil {
			if _, err := nomadvars.NewAPIClient(t.connection()); err != nil {
				errs = append(errs, &policy.FieldError{Field: block, Value: "{ ... }", Reason: err.Error()})
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gpufrac config: %w", err)
	}
	return nil
}

// listenable says why the host of addr ("host:port", its form checked by ParseConfig) cannot be
// listened on here, or "": a misspelt name, an address of another node. It binds the host on a
// port the system picks and lets it go: a port another process holds is no reason to stop the
// agent (startMetrics logs it), and the next launch must find the port free.
func listenable(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err.Error()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err // without "listen tcp host:0", a port that is not the operator's
		}
		return "cannot be listened on: " + err.Error()
	}
	ln.Close()
	return ""
}

// writableDir says why dir cannot be used as a directory this process writes in (created if
// missing), or "". It looks at dir, or at its nearest existing parent when dir is missing.
func writableDir(dir string) string {
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			if p == filepath.Clean(dir) {
				return "exists and is not a directory"
			}
			return fmt.Sprintf("cannot be created: %s is not a directory", p)
		case err == nil:
			if err := canWrite(p); err != nil {
				if p == filepath.Clean(dir) {
					return "not writable by the plugin: " + err.Error()
				}
				return fmt.Sprintf("cannot be created: %s is not writable by the plugin: %v", p, err)
			}
			return ""
		case (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) && filepath.Dir(p) != p:
			p = filepath.Dir(p)
		default:
			return err.Error()
		}
	}
}

// checkGPUIDs refuses ignored_gpu_ids entries and gpu_modes keys that name no GPU of devs, the
// GPUs the backend lists: a typo would leave a GPU shared that was meant to be left alone (and,
// beside nomad-device-nvidia, advertised by both plugins). The error lists what exists.
func checkGPUIDs(c Config, devs []gpu.Device) error {
	known := func(ref string) bool {
		return slices.ContainsFunc(devs, func(d gpu.Device) bool { return d.UUID == ref || strconv.Itoa(d.Index) == ref })
	}
	var have []string
	for _, d := range devs {
		have = append(have, fmt.Sprintf("%d = %s", d.Index, d.UUID))
	}
	valid := "no GPU on this node has this index or UUID (its GPUs: " + strings.Join(have, ", ") + ")"
	if len(devs) == 0 {
		valid = "the GPU backend lists no GPU on this node"
	}
	var errs []error
	for _, id := range c.IgnoredGPUIDs {
		if !known(id) {
			errs = append(errs, &policy.FieldError{Field: KeyIgnoredGPUIDs, Value: strconv.Quote(id), Reason: valid})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.GPUModes)) {
		if !known(k) {
			errs = append(errs, &policy.FieldError{Field: KeyGPUModes + "." + k, Value: strconv.Quote(string(c.GPUModes[k])), Reason: valid})
		}
	}
	// A GPU named by its index and by its UUID with two modes would take whichever key a
	// re-listing applied last; only the listing knows that the two keys are one GPU.
	for _, d := range devs {
		idx := strconv.Itoa(d.Index)
		byIndex, ok1 := c.GPUModes[idx]
		byUUID, ok2 := c.GPUModes[d.UUID]
		if ok1 && ok2 && byIndex != byUUID {
			errs = append(errs, &policy.FieldError{Field: KeyGPUModes + "." + d.UUID, Value: strconv.Quote(string(byUUID)),
				Reason: fmt.Sprintf("names GPU %s, as %s.%s = %q does, with another mode: keep one of the two keys", idx, KeyGPUModes, idx, byIndex)})
		}
		// ParseConfig refused a key that ignored_gpu_ids lists as it is; only the listing
		// knows an index and a UUID for one GPU.
		if slices.Contains(c.IgnoredGPUIDs, idx) || slices.Contains(c.IgnoredGPUIDs, d.UUID) {
			for _, k := range []string{idx, d.UUID} {
				if m, ok := c.GPUModes[k]; ok {
					errs = append(errs, &policy.FieldError{Field: KeyGPUModes + "." + k, Value: strconv.Quote(string(m)),
						Reason: "names GPU " + idx + ": " + ignoredModeReason})
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gpufrac config: %w", err)
	}
	return nil
}
