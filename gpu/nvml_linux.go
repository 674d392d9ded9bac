//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// MIGReason is the health reason of a GPU with MIG enabled.
const MIGReason = "MIG is enabled: gpufrac shares whole GPUs; disable MIG or ignore this GPU"

// nvmlBackend reads GPUs through NVML. NVML itself is thread-safe; the mutex guards only the
// handle cache.
type nvmlBackend struct {
	logger    hclog.Logger
	driver    string
	closeOnce sync.Once
	// marks are the XID and ECC events seen since Open; watch (nil when no GPU reports events)
	// records them.
	marks healthMarks
	watch *eventWatch
	ecc   eccBaseline

	mu      sync.Mutex
	handles map[string]nvml.Device
}

// NewNVML initialises NVML. When the library is missing, no driver is loaded or no GPU is
// present, the error wraps ErrNoNVML and carries NVML's own message.
func NewNVML(logger hclog.Logger) (Backend, error) { return NewNVMLWith(logger, HealthOptions{}) }

// NewNVMLWith is NewNVML with options for how GPU events mark GPUs unhealthy. It starts the
// goroutine that waits for XID and ECC events; Close stops it.
func NewNVMLWith(logger hclog.Logger, health HealthOptions) (b Backend, err error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if err := health.check(); err != nil {
		return nil, err
	}
	// A broken libnvidia-ml must not take the plugin down with it.
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("%w: NVML panicked during initialisation: %v", ErrNoNVML, r)
		}
	}()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvml.Init: %s%s", ErrNoNVML, ret.Error(), initHint(ret))
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, fmt.Errorf("%w: nvml.DeviceGetCount: %s", ErrNoNVML, ret.Error())
	}
	if n == 0 {
		nvml.Shutdown()
		return nil, fmt.Errorf("%w: NVML initialised but found no GPUs", ErrNoNVML)
	}
	driver, ret := nvml.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		driver = "unknown (" + ret.Error() + ")"
	}
	l := logger.Named("gpu-nvml")
	l.Debug("NVML initialised", "driver", driver, "gpus", n)
	nb := &nvmlBackend{logger: l, driver: driver, handles: map[string]nvml.Device{}}
	nb.watch = startEventWatch(l, &nb.marks, health)
	return nb, nil
}

// watchedGPUs is how many GPUs the event watch registered, 0 without a watch (the GPU tests say
// which health the backend can see).
func (n *nvmlBackend) watchedGPUs() int {
	if n.watch == nil {
		return 0
	}
	return len(n.watch.uuids) // written only before the watch started
}

func initHint(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return " (libnvidia-ml.so.1 could not be loaded: is the NVIDIA driver installed?)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return " (the NVIDIA kernel driver is not loaded)"
	case nvml.ERROR_NO_PERMISSION:
		return " (no permission to open the NVIDIA device nodes)"
	}
	return ""
}

func (n *nvmlBackend) Kind() string          { return KindNVML }
func (n *nvmlBackend) DriverVersion() string { return n.driver }

func (n *nvmlBackend) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.watch.close()
		if ret := nvml.Shutdown(); ret != nvml.SUCCESS {
			err = fmt.Errorf("nvml.Shutdown: %s", ret.Error())
		}
	})
	return err
}

// Devices lists every GPU. A GPU whose queries fail is listed as unhealthy with the reason, never
// dropped: dropping it would make its reserved units vanish from the fingerprint.
func (n *nvmlBackend) Devices(ctx context.Context) ([]Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml.DeviceGetCount: %s", ret.Error())
	}
	out := make([]Device, 0, count)
	for i := range count {
		out = append(out, n.describe(i))
	}
	return out, nil
}

func (n *nvmlBackend) describe(i int) Device {
	d := Device{Index: i, Minor: -1, Healthy: true}
	fail := func(what string, ret nvml.Return) {
		if d.Healthy {
			d.Healthy = false
			d.HealthReason = what + ": " + ret.Error()
		}
	}
	h, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		fail("cannot open the GPU", ret)
		return d
	}
	// Without a UUID the device cannot be addressed later; it is reported, unhealthy, with UUID "".
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		fail("cannot read the UUID", ret)
		return d
	}
	d.UUID = uuid
	n.mu.Lock()
	n.handles[uuid] = h
	n.mu.Unlock()
	if name, ret := h.GetName(); ret == nvml.SUCCESS {
		d.Model = name
	} else {
		fail("cannot read the name", ret)
	}
	if total, err := memTotal(h); err == nil {
		d.MemoryBytes = total
	} else {
		d.Healthy, d.HealthReason = false, err.Error()
	}
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		d.PCIBusID = cString(pci.BusId[:])
	} else {
		fail("cannot read the PCI bus id", ret)
	}
	// Not fatal: only exec tasks need the node, and the plugin then lists the control nodes alone.
	if minor, ret := h.GetMinorNumber(); ret == nvml.SUCCESS {
		d.Minor = minor
	}
	if cur, _, ret := h.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
		d.Healthy, d.HealthReason = false, MIGReason
	}
	// An event's mark comes before what the queries said: it is the fault, and a GPU that fell
	// off the bus (XID 79) fails its queries because of it. Were a failed query's reason shown
	// instead, the mark's time (EventAt) would be lost and the reason would change with each
	// query that fails or answers, as if the GPU had recovered.
	if mark := n.marks.get(uuid); mark.reason != "" {
		mark.apply(&d)
		return d
	}
	if !d.Healthy {
		return d // the memory queries would only cost time: the GPU is out of service already
	}
	m, what, ret := memoryErrors(h)
	if ret != nvml.SUCCESS {
		fail(what, ret)
		return d
	}
	m.Uncorrectable = n.ecc.since(uuid, m.Uncorrectable)
	if reason := m.reason(); reason != "" {
		d.Healthy, d.HealthReason = false, reason
	}
	return d
}

// memTotal prefers the v1 query and falls back to v2, which some drivers answer when v1 fails.
func memTotal(h nvml.Device) (size.Bytes, error) {
	if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		return size.Bytes(m.Total), nil
	}
	m, ret := h.GetMemoryInfo_v2()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("cannot read the memory size: %s", ret.Error())
	}
	return size.Bytes(m.Total), nil
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// handle returns the cached handle of uuid, looking it up on first use.
func (n *nvmlBackend) handle(ctx context.Context, uuid string) (nvml.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	h, ok := n.handles[uuid]
	n.mu.Unlock()
	if ok {
		return h, nil
	}
	h, ret := nvml.DeviceGetHandleByUUID(uuid)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT:
		return nil, fmt.Errorf("%w %q: %s", ErrUnknownDevice, uuid, ret.Error())
	default:
		return nil, fmt.Errorf("GPU %s: %s", uuid, ret.Error())
	}
	n.mu.Lock()
	n.handles[uuid] = h
	n.mu.Unlock()
	return h, nil
}

// failed drops a cached handle after a failed query, so a GPU that was reset or lost is looked
// up afresh next time.
func (n *nvmlBackend) failed(uuid, what string, ret nvml.Return) error {
	n.mu.Lock()
	delete(n.handles, uuid)
	n.mu.Unlock()
	return fmt.Errorf("GPU %s: %s: %s", uuid, what, ret.Error())
}

func (n *nvmlBackend) MemoryUsed(ctx context.Context, uuid string) (size.Bytes, error) {
	h, err := n.handle(ctx, uuid)
	if err != nil {
		return 0, err
	}
	if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		return size.Bytes(m.Used), nil
	}
	m, ret := h.GetMemoryInfo_v2()
	if ret != nvml.SUCCESS {
		return 0, n.failed(uuid, "memory info", ret)
	}
	// v2 splits the driver's reserve out of Used; add it back so both paths mean the same.
	return size.Bytes(m.Used + m.Reserved), nil
}

// notAvailable is NVML's "value not available" for a process's used memory (all bits set).
const notAvailable = ^uint64(0)

// Processes merges the plain compute processes with the MPS clients, since an MPS client may be
// listed by either query depending on the driver. The MPS server shows up as its own process.
func (n *nvmlBackend) Processes(ctx context.Context, uuid string) ([]Process, error) {
	h, err := n.handle(ctx, uuid)
	if err != nil {
		return nil, err
	}
	compute, ret := h.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, n.failed(uuid, "compute processes", ret)
	}
	mps, ret := h.GetMPSComputeRunningProcesses()
	switch {
	case ret == nvml.SUCCESS:
	case errors.Is(ret, nvml.ERROR_NOT_SUPPORTED), errors.Is(ret, nvml.ERROR_FUNCTION_NOT_FOUND):
		mps = nil // no MPS on this GPU or driver
	default:
		return nil, n.failed(uuid, "MPS compute processes", ret)
	}
	return mergeProcesses(compute, mps), nil
}

// mergeProcesses joins NVML's process lists into one entry per PID, sorted by PID.
func mergeProcesses(lists ...[]nvml.ProcessInfo) []Process {
	byPID := map[int]size.Bytes{}
	for _, list := range lists {
		for _, p := range list {
			used := p.UsedGpuMemory
			// NVML cannot always attribute memory to a process (e.g. some virtualised setups)
			// and says so with this value. It becomes 0: a watchdog then sees the process but
			// cannot charge it, which is the truth, rather than an absurd 16 EiB.
			if used == notAvailable {
				used = 0
			}
			pid := int(p.Pid)
			// The same process listed by both queries is one process: keep the larger reading.
			if cur, ok := byPID[pid]; !ok || size.Bytes(used) > cur {
				byPID[pid] = size.Bytes(used)
			}
		}
	}
	out := make([]Process, 0, len(byPID))
	for pid, used := range byPID {
		out = append(out, Process{PID: pid, UsedBytes: used})
	}
	slices.SortFunc(out, func(a, b Process) int { return a.PID - b.PID })
	return out
}

func (n *nvmlBackend) Utilization(ctx context.Context, uuid string) (int, error) {
	h, err := n.handle(ctx, uuid)
	if err != nil {
		return 0, err
	}
	u, ret := h.GetUtilizationRates()
	if ret != nvml.SUCCESS {
		return 0, n.failed(uuid, "utilization", ret)
	}
	return int(u.Gpu), nil
}
