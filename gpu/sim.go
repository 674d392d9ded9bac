package gpu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
	"github.com/hashicorp/go-hclog"
)

// SimDriverReserve is what the simulated driver keeps for itself on every simulated GPU. A real
// driver reserves a few hundred MiB that no process owns; simulating it makes MemoryUsed larger
// than the sum of Processes, as on real hardware, so code that confuses the two shows up in CI.
const SimDriverReserve = 500 * size.MiB

// MaxSimMemory bounds a simulated GPU's memory far above any real GPU's: every unit of a GPU is
// an instance in the fingerprint, and an absurd size would have the plugin list millions of them.
const MaxSimMemory = 2 * size.TiB

// EnvSimDir names the simulated backend's state directory for child processes (simulated jobs,
// the plugin launched by a test harness).
const EnvSimDir = taskenv.SimDir

// DefaultSimGPUs is what the simulated backend offers when nothing is configured.
var DefaultSimGPUs = []string{"H100=80GiB"}

// SimConfig configures the simulated backend.
type SimConfig struct {
	// GPUs are "MODEL=SIZE" entries, e.g. "H100=80GiB"; "2xH100=80GiB" counts too. Empty means:
	// attach to the GPUs another process already set up in Dir.
	GPUs []string
	// Dir is the shared state directory, created if missing. Empty means $GPUFRAC_SIM_DIR, or
	// else gpufrac-sim-<uid> in the system temporary directory.
	Dir    string
	Logger hclog.Logger
	// Health tunes how raised events mark a GPU, as for the NVML backend.
	Health HealthOptions
}

// Simulated is a GPU backend whose state lives in files under one directory, so that several
// processes (the plugin, the runner, tests and simulated jobs that are real child processes)
// see the same simulated GPUs. Layout:
//
//	Dir/gpus.json           the devices (index, UUID, model, memory)
//	Dir/<uuid>/health       present when the GPU is unhealthy; holds the reason
//	Dir/<uuid>/events       the XID and ECC events raised on it, one a line (simhealth.go)
//	Dir/<uuid>/procs/<pid>  "<used bytes> <busy 0|1> <process start time>", replaced atomically
//
// A process entry counts only while that process is alive and not a zombie, and while its start
// time matches the one recorded (so a recycled PID does not inherit a dead job's memory). Dead
// entries are removed by whoever lists them, which makes kill paths real: SIGKILL a simulated
// job and its memory is gone on the next Processes call.
type Simulated struct {
	dir     string
	devices []Device // immutable after construction; health is read from files on each call
	logger  hclog.Logger
	// opened is when this handle opened: it sees the events raised since, as an NVML process
	// sees those after it registered for them.
	opened  time.Time
	ignored map[uint64]bool
	ecc     eccBaseline
}

var _ Backend = (*Simulated)(nil)

type simGPUFile struct {
	Index       int        `json:"index"`
	UUID        string     `json:"uuid"`
	Model       string     `json:"model"`
	MemoryBytes size.Bytes `json:"memory_bytes"`
	PCIBusID    string     `json:"pci_bus_id"`
}

// DefaultSimDir is the state directory used when none is configured.
func DefaultSimDir() string {
	if d := os.Getenv(EnvSimDir); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "gpufrac-sim-"+strconv.Itoa(os.Getuid()))
}

// NewSimulated sets up (or attaches to) simulated GPUs in cfg.Dir.
func NewSimulated(cfg SimConfig) (*Simulated, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	dir := cfg.Dir
	if dir == "" {
		dir = DefaultSimDir()
	}
	if err := cfg.Health.check(); err != nil {
		return nil, err
	}
	// Without its monotonic reading: events carry wall-clock times, written by other processes.
	s := &Simulated{dir: dir, logger: logger.Named("gpu-sim"), opened: time.Now().Round(0), ignored: xidSet(cfg.Health.IgnoredXIDs)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("simulated GPU directory %q: %w", dir, err)
	}
	if len(cfg.GPUs) == 0 {
		devs, err := s.loadDevices()
		if err != nil {
			return nil, err
		}
		s.devices = devs
		return s, nil
	}
	var entries []string
	for _, g := range cfg.GPUs {
		e, err := ParseSimSpec(g)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e...)
	}
	files := make([]simGPUFile, 0, len(entries))
	for i, e := range entries {
		model, mem, err := parseSimEntry(e)
		if err != nil {
			return nil, err
		}
		files = append(files, simGPUFile{
			Index: i, UUID: SimUUID(i, model), Model: model, MemoryBytes: mem,
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x51+i),
		})
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Join(dir, f.UUID, "procs"), 0o755); err != nil {
			return nil, fmt.Errorf("simulated GPU %s: %w", f.UUID, err)
		}
	}
	if old, err := s.loadDevices(); err == nil && !sameDevices(old, files) {
		s.logger.Warn("replacing the simulated GPUs recorded in the state directory", "dir", dir,
			"old", len(old), "new", len(files))
	}
	data, err := json.MarshalIndent(files, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, "gpus.json"), append(data, '\n')); err != nil {
		return nil, fmt.Errorf("simulated GPU directory %q: %w", dir, err)
	}
	for _, f := range files {
		s.devices = append(s.devices, f.device())
	}
	s.logger.Debug("simulated GPUs ready", "dir", dir, "gpus", len(files))
	return s, nil
}

func (f simGPUFile) device() Device {
	return Device{Index: f.Index, UUID: f.UUID, Model: f.Model, MemoryBytes: f.MemoryBytes,
		// As on most real hosts, the minor number follows the index; the plugin lists a node only
		// when it exists, so a simulated GPU on a machine without one gets none.
		PCIBusID: f.PCIBusID, Minor: f.Index, Healthy: true}
}

func sameDevices(old []Device, files []simGPUFile) bool {
	if len(old) != len(files) {
		return false
	}
	for i := range old {
		if old[i].UUID != files[i].UUID || old[i].MemoryBytes != files[i].MemoryBytes {
			return false
		}
	}
	return true
}

func (s *Simulated) loadDevices() ([]Device, error) {
	path := filepath.Join(s.dir, "gpus.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no simulated GPUs in %q: configure some (e.g. %q) or point at the directory the plugin or runner uses: %w",
			s.dir, "H100=80GiB", ErrUnknownDevice)
	}
	if err != nil {
		return nil, fmt.Errorf("simulated GPUs: %w", err)
	}
	var files []simGPUFile
	if err := json.Unmarshal(data, &files); err != nil {
		return nil, fmt.Errorf("simulated GPUs: %s is corrupt: %w", path, err)
	}
	devs := make([]Device, 0, len(files))
	for _, f := range files {
		devs = append(devs, f.device())
	}
	return devs, nil
}

// SimUUID is the UUID of simulated GPU index with this model. It is stable across restarts
// (ledger instance IDs depend on it) and shaped like a real one, but the "51m" prefix is not
// hexadecimal, so no one mistakes it for real hardware.
func SimUUID(index int, model string) string {
	h := sha256.Sum256([]byte(strconv.Itoa(index) + "\x00" + model))
	x := hex.EncodeToString(h[:])
	return fmt.Sprintf("GPU-51m%05d-%s-%s-%s-%s", index%100000, x[0:4], x[4:8], x[8:12], x[12:24])
}

// ParseSimSpec reads a simulated GPU list: "H100=80GiB,H100=80GiB" or "2xH100=80GiB", entries
// separated by commas. It returns one "MODEL=SIZE" entry per GPU. Errors name the bad entry.
func ParseSimSpec(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("simulated GPUs: empty list (want e.g. %q)", "H100=80GiB")
	}
	var out []string
	for _, raw := range strings.Split(s, ",") {
		e := strings.TrimSpace(raw)
		count := 1
		if i := strings.Index(e, "x"); i > 0 && isDigits(e[:i]) {
			n, err := strconv.Atoi(e[:i])
			if err != nil || n < 1 || n > 64 {
				return nil, fmt.Errorf("simulated GPU entry %q: count %q must be 1 to 64", raw, e[:i])
			}
			count, e = n, e[i+1:]
		}
		model, mem, err := parseSimEntry(e)
		if err != nil {
			return nil, fmt.Errorf("simulated GPU entry %q: %w", raw, err)
		}
		for range count {
			out = append(out, model+"="+exactSize(mem))
		}
	}
	return out, nil
}

func parseSimEntry(e string) (string, size.Bytes, error) {
	model, mem, ok := strings.Cut(e, "=")
	model, mem = strings.TrimSpace(model), strings.TrimSpace(mem)
	if !ok || model == "" || mem == "" {
		return "", 0, fmt.Errorf("want MODEL=SIZE such as %q", "H100=80GiB")
	}
	if strings.ContainsAny(model, "/\\\x00") {
		return "", 0, fmt.Errorf("model %q must not contain slashes", model)
	}
	b, err := size.Parse(mem)
	if err != nil {
		return "", 0, err
	}
	if b < size.GiB {
		return "", 0, fmt.Errorf("memory %q is below 1GiB", mem)
	}
	if b > MaxSimMemory {
		return "", 0, fmt.Errorf("memory %q is above %s", mem, MaxSimMemory)
	}
	return model, b, nil
}

// exactSize prints b readably when that loses nothing, else as a byte count.
func exactSize(b size.Bytes) string {
	if back, err := size.Parse(b.String()); err == nil && back == b {
		return b.String()
	}
	return strconv.FormatUint(uint64(b), 10)
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// Dir is the state directory; hand it to simulated jobs as $GPUFRAC_SIM_DIR.
func (s *Simulated) Dir() string { return s.dir }

// Kind implements Backend.
func (s *Simulated) Kind() string { return KindSimulated }

// DriverVersion implements Backend.
func (s *Simulated) DriverVersion() string { return "simulated" }

// Close implements Backend. The state directory stays: other processes may share it.
func (s *Simulated) Close() error { return nil }

func (s *Simulated) device(uuid string) (Device, error) {
	for _, d := range s.devices {
		if d.UUID == uuid {
			return d, nil
		}
	}
	return Device{}, fmt.Errorf("%w %q (simulated GPUs in %s)", ErrUnknownDevice, uuid, s.dir)
}

// Devices implements Backend.
func (s *Simulated) Devices(ctx context.Context) ([]Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(slices.Clone(s.devices), func(d Device) bool { return s.lost(d.UUID) != nil })
	for i := range out {
		mark, err := s.health(out[i].UUID)
		if err != nil {
			mark = eventMark{reason: "cannot read simulated health: " + err.Error()}
		}
		mark.apply(&out[i])
	}
	return out, nil
}

// health is why GPU uuid is out of service, or "": a fault pinned with SetHealth first, then
// what the NVML backend's rules make of its events and its memory (backendHealth).
func (s *Simulated) health(uuid string) (eventMark, error) {
	reason, err := os.ReadFile(filepath.Join(s.dir, uuid, "health"))
	switch {
	case err == nil:
		if r := strings.TrimSpace(string(reason)); r != "" {
			return eventMark{reason: r}, nil
		}
		return eventMark{reason: "simulated fault"}, nil
	case !errors.Is(err, os.ErrNotExist):
		return eventMark{}, err
	}
	return s.backendHealth(uuid)
}

// MemoryUsed implements Backend: the sum of live processes plus SimDriverReserve.
func (s *Simulated) MemoryUsed(ctx context.Context, uuid string) (size.Bytes, error) {
	procs, err := s.live(ctx, uuid)
	if err != nil {
		return 0, err
	}
	total := SimDriverReserve
	for _, p := range procs {
		total += p.used
	}
	return total, nil
}

// Processes implements Backend. Entries of dead or zombie processes are dropped and removed.
func (s *Simulated) Processes(ctx context.Context, uuid string) ([]Process, error) {
	if fault, err := os.ReadFile(filepath.Join(s.dir, uuid, simFaultFile)); err == nil {
		return nil, fmt.Errorf("simulated NVML error on GPU %s: %s", uuid, strings.TrimSpace(string(fault)))
	}
	procs, err := s.live(ctx, uuid)
	if err != nil {
		return nil, err
	}
	out := make([]Process, 0, len(procs))
	for _, p := range procs {
		out = append(out, Process{PID: p.pid, UsedBytes: p.used})
	}
	return out, nil
}

// Utilization implements Backend: 100 while any live process says it is computing, else 0; on
// a GPU that time-slices (SimContention with KernelSM), the share of its time a kernel runs: the
// busy processes' SM loads over KernelSM, at most 100, so that GPU busy and GPM stay in the
// ratio the H200 showed.
func (s *Simulated) Utilization(ctx context.Context, uuid string) (int, error) {
	c, on, err := s.contention(uuid)
	if err != nil {
		return 0, err
	}
	if on && c.KernelSM > 0 {
		loads, err := s.busyLoads(ctx, uuid)
		if err != nil {
			return 0, err
		}
		var sm float64
		for _, l := range loads {
			sm += l.SMUtil
		}
		return int(math.Round(min(100, sm/c.KernelSM))), nil
	}
	procs, err := s.live(ctx, uuid)
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		if p.busy {
			return 100, nil
		}
	}
	return 0, nil
}

// SetUsage records that pid uses b bytes on GPU uuid (not busy). pid must be a running process:
// entries of dead processes are dropped.
func (s *Simulated) SetUsage(uuid string, pid int, b size.Bytes) error {
	return s.SetProcess(uuid, pid, b, false)
}

// SetProcess records pid's usage on GPU uuid and whether it is computing (for Utilization).
// Simulated jobs call it about 50 times a second.
func (s *Simulated) SetProcess(uuid string, pid int, used size.Bytes, busy bool) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	st, err := readProcStat(pid)
	if err != nil {
		return fmt.Errorf("simulated GPU %s: process %d: %w", uuid, pid, err)
	}
	if !st.alive {
		return fmt.Errorf("simulated GPU %s: process %d is not running (dead processes hold no GPU memory)", uuid, pid)
	}
	b := 0
	if busy {
		b = 1
	}
	line := fmt.Sprintf("%d %d %d\n", uint64(used), b, st.start)
	return writeFileAtomic(s.procPath(uuid, pid), []byte(line))
}

// ClearProcess removes pid from GPU uuid, as when a job frees its context and exits.
func (s *Simulated) ClearProcess(uuid string, pid int) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	if err := os.Remove(s.procPath(uuid, pid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// simFaultFile, in a GPU's directory, makes Processes fail as NVML does when a query errors.
const simFaultFile = "nvml-fault"

// SetProcessesFault makes Processes of GPU uuid fail with msg (NVML_ERROR_UNKNOWN, say) for every
// process sharing Dir, until it is called with an empty msg: a fault to test the watchdog with.
func (s *Simulated) SetProcessesFault(uuid, msg string) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	path := filepath.Join(s.dir, uuid, simFaultFile)
	if msg == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeFileAtomic(path, []byte(msg+"\n"))
}

// SetHealth marks GPU uuid healthy, or unhealthy with a reason, for every process sharing Dir.
func (s *Simulated) SetHealth(uuid string, ok bool, reason string) error {
	return s.setMark(uuid, "health", !ok, reason, "simulated fault")
}

// setMark puts file in GPU uuid's directory, holding reason (or def when it is blank), or
// removes it: a fault state that every process sharing Dir sees.
func (s *Simulated) setMark(uuid, file string, on bool, reason, def string) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	path := filepath.Join(s.dir, uuid, file)
	if !on {
		return removeIfPresent(path)
	}
	if strings.TrimSpace(reason) == "" {
		reason = def
	}
	return writeFileAtomic(path, []byte(reason+"\n"))
}

func (s *Simulated) procPath(uuid string, pid int) string {
	return filepath.Join(s.dir, uuid, "procs", strconv.Itoa(pid))
}
