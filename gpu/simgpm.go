package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SensorGPM names the simulated performance monitor for SetSensorFault.
const SensorGPM = "gpm"

// The load of a busy simulated process that declared none: the SMs fully active, half the warp
// slots occupied. Utilization says 100 for such a process too.
const (
	SimBusySMUtil      = 100.0
	SimBusySMOccupancy = 50.0
)

// simGPMModels are the models whose simulated GPUs have a performance monitor, as on real
// hardware (GPM came with Hopper), matched on the model name.
var simGPMModels = []string{"H100", "H200", "H800", "H20", "B100", "B200", "B300"}

// SimHasGPM is whether a simulated GPU of this model has a performance monitor.
func SimHasGPM(model string) bool {
	m := strings.ToUpper(model)
	for _, g := range simGPMModels {
		if strings.Contains(m, g) {
			return true
		}
	}
	return false
}

// SimLoad is how hard a simulated process works the SMs while it is busy, in percent.
type SimLoad struct {
	SMUtil      float64
	SMOccupancy float64
}

func (l SimLoad) check() error {
	if !(l.SMUtil >= 0 && l.SMUtil <= 100) || !(l.SMOccupancy >= 0 && l.SMOccupancy <= 100) {
		return fmt.Errorf("SM load %g%% util, %g%% occupancy: want percentages from 0 to 100", l.SMUtil, l.SMOccupancy)
	}
	return nil
}

// simLoadDir, in a GPU's directory, holds one "<sm util> <occupancy> <start>" file a process.
const simLoadDir = "load"

// simGPMFile pins the GPU's GPM readings: "<sm util> <occupancy>".
const simGPMFile = "gpm"

// SetProcessLoad declares how hard pid works the SMs of GPU uuid while it reports itself busy
// (SetProcess). It counts only while pid is the same live process; a job declares it once, before
// it starts computing.
func (s *Simulated) SetProcessLoad(uuid string, pid int, l SimLoad) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	if err := l.check(); err != nil {
		return fmt.Errorf("simulated GPU %s: process %d: %w", uuid, pid, err)
	}
	st, err := readProcStat(pid)
	if err != nil {
		return fmt.Errorf("simulated GPU %s: process %d: %w", uuid, pid, err)
	}
	if !st.alive {
		return fmt.Errorf("simulated GPU %s: process %d is not running", uuid, pid)
	}
	dir := filepath.Join(s.dir, uuid, simLoadDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	line := fmt.Sprintf("%g %g %d\n", l.SMUtil, l.SMOccupancy, st.start)
	return writeFileAtomic(filepath.Join(dir, strconv.Itoa(pid)), []byte(line))
}

// SetGPM pins GPU uuid's GPM readings for every process sharing Dir; nil returns them to the
// figures computed from the busy processes.
func (s *Simulated) SetGPM(uuid string, l *SimLoad) error {
	return setPinned(s, uuid, simGPMFile, l, SimLoad.check, func(l SimLoad) string {
		return fmt.Sprintf("%g %g\n", l.SMUtil, l.SMOccupancy)
	})
}

// setPinned writes v, checked, to GPU uuid's file, where every process sharing Dir reads it;
// nil removes the file, returning the GPU to its computed figures.
func setPinned[T any](s *Simulated, uuid, file string, v *T, check func(T) error, format func(T) string) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	path := filepath.Join(s.dir, uuid, file)
	if v == nil {
		return removeIfPresent(path)
	}
	if err := check(*v); err != nil {
		return fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	return writeFileAtomic(path, []byte(format(*v)))
}

// OpenGPM implements Backend. The simulated monitor reports, for the period since the last Read,
// the load at the moment of the Read: pinned (SetGPM), else the sum of the declared loads of the
// busy live processes (SimBusySMUtil and SimBusySMOccupancy for one that declared none), at most
// 100. It is deterministic: the same processes give the same figures. Read every few hundred
// milliseconds, as real GPM is, a job's phases of seconds come out right to within one period.
func (s *Simulated) OpenGPM(ctx context.Context, uuid string) (GPMSampler, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := s.device(uuid)
	if err != nil {
		return nil, err
	}
	if !SimHasGPM(d.Model) {
		return nil, fmt.Errorf("simulated GPU %s (%s): %w: GPM came with Hopper", uuid, d.Model, ErrNoGPM)
	}
	if err := s.lost(uuid); err != nil {
		return nil, err
	}
	if err := s.gpmFault(uuid); err != nil {
		return nil, err
	}
	return &simGPM{s: s, uuid: uuid, at: time.Now()}, nil
}

type simGPM struct {
	s    *Simulated
	uuid string

	mu     sync.Mutex
	at     time.Time
	closed bool
}

func (g *simGPM) Read(ctx context.Context) (GPM, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return GPM{}, fmt.Errorf("simulated GPU %s: GPM sampler is closed", g.uuid)
	}
	l, err := g.s.gpmLoad(ctx, g.uuid)
	now := time.Now()
	out := GPM{Start: g.at, End: now, SMUtil: l.SMUtil, SMOccupancy: l.SMOccupancy}
	g.at = now // as with NVML, a failed period still ends where the next begins
	if err != nil {
		return GPM{}, err
	}
	return out, nil
}

func (g *simGPM) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}

func (s *Simulated) gpmFault(uuid string) error {
	if fault, err := os.ReadFile(filepath.Join(s.dir, uuid, SensorGPM+"-fault")); err == nil {
		return fmt.Errorf("simulated NVML error on GPU %s: %s: %s", uuid, SensorGPM, strings.TrimSpace(string(fault)))
	}
	return nil
}

// gpmLoad is the GPU's load now: pinned, else summed over the busy live processes.
func (s *Simulated) gpmLoad(ctx context.Context, uuid string) (SimLoad, error) {
	if err := ctx.Err(); err != nil {
		return SimLoad{}, err
	}
	// Before the pinned figures: a lost GPU answers nothing, whatever a test pinned on it.
	if err := s.lost(uuid); err != nil {
		return SimLoad{}, err
	}
	if err := s.gpmFault(uuid); err != nil {
		return SimLoad{}, err
	}
	dir := filepath.Join(s.dir, uuid)
	data, err := os.ReadFile(filepath.Join(dir, simGPMFile))
	switch {
	case err == nil:
		l, perr := parseLoad(string(data))
		if perr != nil {
			return SimLoad{}, fmt.Errorf("simulated GPU %s: %s: %w", uuid, simGPMFile, perr)
		}
		return l, nil
	case !errors.Is(err, os.ErrNotExist):
		return SimLoad{}, fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	loads, err := s.busyLoads(ctx, uuid)
	if err != nil {
		return SimLoad{}, err
	}
	c, on, err := s.contention(uuid)
	if err != nil {
		return SimLoad{}, err
	}
	if !on {
		c = SimContention{}
	}
	gpm, _ := c.share(loads)
	return gpm, nil
}

// busyLoads are the declared loads of the GPU's busy live processes (the default load for one
// that declared none), by PID; the declarations of processes that are gone are removed.
func (s *Simulated) busyLoads(ctx context.Context, uuid string) (map[int]SimLoad, error) {
	procs, err := s.live(ctx, uuid)
	if err != nil {
		return nil, err
	}
	out := map[int]SimLoad{}
	alive := map[int]bool{}
	for _, p := range procs {
		alive[p.pid] = true
		if p.busy {
			out[p.pid] = s.processLoad(uuid, p.pid)
		}
	}
	s.dropDeadLoads(uuid, alive)
	return out, nil
}

// processLoad is pid's declared load, or the default of a busy process. A declaration left by
// an earlier process with the same PID (its start time differs) is removed.
func (s *Simulated) processLoad(uuid string, pid int) SimLoad {
	def := SimLoad{SMUtil: SimBusySMUtil, SMOccupancy: SimBusySMOccupancy}
	path := filepath.Join(s.dir, uuid, simLoadDir, strconv.Itoa(pid))
	data, err := os.ReadFile(path)
	if err != nil {
		return def
	}
	l, start, err := parseLoadEntry(string(data))
	if err != nil {
		s.logger.Warn("ignoring an unreadable simulated load entry", "path", path, "error", err)
		return def
	}
	if st, err := readProcStat(pid); err != nil || !st.alive || (start != 0 && st.start != 0 && start != st.start) {
		_ = os.Remove(path)
		return def
	}
	return l
}

// dropDeadLoads removes the declarations of processes that are gone, as live does their entries.
func (s *Simulated) dropDeadLoads(uuid string, listed map[int]bool) {
	dir := filepath.Join(s.dir, uuid, simLoadDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || listed[pid] {
			continue
		}
		if st, err := readProcStat(pid); err == nil && !st.alive {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func parseLoadEntry(s string) (SimLoad, uint64, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return SimLoad{}, 0, fmt.Errorf("want 3 fields, got %q", s)
	}
	l, err := parseLoad(f[0] + " " + f[1])
	if err != nil {
		return SimLoad{}, 0, err
	}
	start, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return SimLoad{}, 0, fmt.Errorf("malformed start time in %q: %w", s, err)
	}
	return l, start, nil
}

// parseLoad reads "<sm util> <occupancy>".
func parseLoad(s string) (SimLoad, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return SimLoad{}, fmt.Errorf("want 2 fields, got %q", s)
	}
	u, err1 := strconv.ParseFloat(f[0], 64)
	o, err2 := strconv.ParseFloat(f[1], 64)
	if err := errors.Join(err1, err2); err != nil {
		return SimLoad{}, fmt.Errorf("malformed load %q: %w", s, err)
	}
	l := SimLoad{SMUtil: u, SMOccupancy: o}
	return l, l.check()
}

// simContentionFile, in a GPU's directory, turns SM contention on for that GPU:
// "<switch cost> <kernel SM share>".
const simContentionFile = "contention"

// DefaultSimSwitchCost is the share of the SMs' time the simulated GPU loses for each busy
// context beyond the first while their demands exceed the SMs. It is an assumption, not a
// measurement (docs/benchmarks.md says so): time-slicing switches contexts every few
// milliseconds and each switch saves and restores state.
const DefaultSimSwitchCost = 0.02

// minSimEfficiency keeps a GPU crowded with contexts doing some work: a model that reached
// zero would stall every job on it for ever.
const minSimEfficiency = 0.25

// DefaultSimKernelSM is the share of the SMs a process's running kernels keep active on the
// H200: busy seed 1's exclusive arm (2026-12-03) kept the SMs 54.5% active (GPM) while a kernel
// ran 60% of the time (NVML utilization).
const DefaultSimKernelSM = 0.91

// SimContention is how a simulated GPU shares its SMs among busy processes whose declared
// demands exceed what it can serve. Without it (the default) every process works at full speed
// whatever the others do.
//
// With KernelSM set, the GPU time-slices, as a GPU without MPS does: it runs one process's
// kernels at a time, so a process whose load is SMUtil needs a kernel running SMUtil/KernelSM of
// its time, the processes' needs add up, and past 100% each works at its share of the GPU's
// time; the SMs are never more than KernelSM active. With KernelSM 0 the SMs themselves are
// shared (processes' SMUtil add up to 100%), as kernels of several processes running at once
// would share them (MPS). Either way every busy context beyond the first costs SwitchCost of the
// GPU's time while the demands exceed it.
type SimContention struct {
	SwitchCost float64
	KernelSM   float64
}

func (c SimContention) check() error {
	if !(c.SwitchCost >= 0 && c.SwitchCost < 1) {
		return fmt.Errorf("SM contention switch cost %g: want a fraction from 0 to below 1", c.SwitchCost)
	}
	if !(c.KernelSM == 0 || (c.KernelSM > 0 && c.KernelSM <= 1)) {
		return fmt.Errorf("SM contention kernel SM share %g: want 0 (the SMs are shared) or a fraction above 0, at most 1", c.KernelSM)
	}
	return nil
}

// share is what a GPU whose busy processes declared loads shows, and how fast each process's
// work advances relative to alone (1 while the demands fit).
func (c SimContention) share(loads map[int]SimLoad) (SimLoad, float64) {
	var sum SimLoad
	n := 0
	for _, l := range loads {
		sum.SMUtil += l.SMUtil
		sum.SMOccupancy += l.SMOccupancy
		if l.SMUtil > 0 {
			n++
		}
	}
	// ceiling is how active the SMs can be: fully when they are shared, KernelSM when one
	// process's kernels run at a time; demand is the busy processes' need of it.
	ceiling, demand := 1.0, sum.SMUtil
	if c.KernelSM > 0 {
		ceiling, demand = c.KernelSM, sum.SMUtil/c.KernelSM
	}
	rate, eff := 1.0, 1.0
	if demand > 100 {
		eff = max(minSimEfficiency, 1-c.SwitchCost*float64(n-1))
		rate = 100 / demand * eff
	}
	// The time lost to switching is not active.
	sum.SMUtil, sum.SMOccupancy = min(sum.SMUtil, 100*ceiling*eff), min(sum.SMOccupancy, 100*ceiling*eff)
	return sum, rate
}

// SetContention turns SM contention on for GPU uuid (nil turns it off), for every process
// sharing Dir: the processes' work slows (WorkClock) and GPM shows the time lost to switching.
func (s *Simulated) SetContention(uuid string, c *SimContention) error {
	return setPinned(s, uuid, simContentionFile, c, SimContention.check, func(c SimContention) string {
		return strconv.FormatFloat(c.SwitchCost, 'g', -1, 64) + " " + strconv.FormatFloat(c.KernelSM, 'g', -1, 64) + "\n"
	})
}

// parseContention reads a contention file: "<switch cost> <kernel SM share>".
func parseContention(s string) (SimContention, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return SimContention{}, fmt.Errorf("want 2 fields, got %d", len(f))
	}
	cost, err1 := strconv.ParseFloat(f[0], 64)
	kernel, err2 := strconv.ParseFloat(f[1], 64)
	if err := errors.Join(err1, err2); err != nil {
		return SimContention{}, err
	}
	return SimContention{SwitchCost: cost, KernelSM: kernel}, nil
}

// contention is GPU uuid's contention setting, and whether it is on.
func (s *Simulated) contention(uuid string) (SimContention, bool, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, uuid, simContentionFile))
	if errors.Is(err, os.ErrNotExist) {
		return SimContention{}, false, nil
	}
	if err != nil {
		return SimContention{}, false, fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	c, err := parseContention(string(data))
	if err == nil {
		err = c.check()
	}
	if err != nil {
		return SimContention{}, false, fmt.Errorf("simulated GPU %s: %s %q: %w", uuid, simContentionFile, strings.TrimSpace(string(data)), err)
	}
	return c, true, nil
}

// WorkRate is how fast pid's work advances on GPU uuid now, relative to running alone: 1 when
// the GPU has no contention set, when pid is not busy, or when the busy processes' demands fit
// in the SMs; else pid's share (SimContention).
func (s *Simulated) WorkRate(ctx context.Context, uuid string, pid int) (float64, error) {
	c, on, err := s.contention(uuid)
	if err != nil || !on {
		return 1, err
	}
	loads, err := s.busyLoads(ctx, uuid)
	if err != nil {
		return 1, err
	}
	if _, busy := loads[pid]; !busy {
		return 1, nil
	}
	_, rate := c.share(loads)
	return rate, nil
}

// simWorkRateEvery is how often a WorkClock asks for its rate again: reading every process's
// entry each 20 ms tick of a dozen jobs would be most of a small machine's work.
const simWorkRateEvery = 200 * time.Millisecond

// SimWorkClock is a simulated job's work done: the time it ran, slowed by SM contention on its
// GPU (WorkRate), so a job's phases stretch when its neighbours want the SMs too.
type SimWorkClock struct {
	s    *Simulated
	uuid string
	pid  int
	rate float64
	at   time.Time
}

// WorkClock is the work clock of process pid on GPU uuid.
func (s *Simulated) WorkClock(uuid string, pid int) *SimWorkClock {
	return &SimWorkClock{s: s, uuid: uuid, pid: pid, rate: 1}
}

// Advance is the work done in dt of running: dt at the GPU's current rate. A rate that cannot be
// read keeps the last one: a job must not stop or speed up over a failed read.
func (c *SimWorkClock) Advance(dt time.Duration) time.Duration {
	if now := time.Now(); now.Sub(c.at) >= simWorkRateEvery {
		c.at = now
		if r, err := c.s.WorkRate(context.Background(), c.uuid, c.pid); err == nil {
			c.rate = r
		}
	}
	return time.Duration(float64(dt) * c.rate)
}
