package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Simulated sensors, named for SetSensorFault.
const (
	SensorTemperature = "temperature"
	SensorPower       = "power"
)

// Readings of a simulated GPU nobody pinned: a cool idle GPU, a warm one while any of its
// processes computes. Power is a share of the model's board limit.
const (
	SimIdleTemperature = 33
	SimBusyTemperature = 67
	simIdlePowerPct    = 12
	simBusyPowerPct    = 78
)

// simPowerLimits are board power limits (W) of common models, matched in order on the model
// name; anything else gets simDefaultPowerLimit.
var simPowerLimits = []struct {
	model string
	watts uint32
}{
	{"H200", 700}, {"H100", 700}, {"A100", 400}, {"L40", 300}, {"L4", 72}, {"T4", 70}, {"A10", 150},
}

const simDefaultPowerLimit = 300

// SimPowerLimit is the power limit, in mW, the simulated backend reports for a model.
func SimPowerLimit(model string) uint32 {
	m := strings.ToUpper(model)
	for _, l := range simPowerLimits {
		if strings.Contains(m, l.model) {
			return l.watts * 1000
		}
	}
	return simDefaultPowerLimit * 1000
}

// SimSensors are readings a test pins on a simulated GPU (SetSensors).
type SimSensors struct {
	TemperatureC int
	Power        Power
}

const simSensorsFile = "sensors"

// SetSensors pins GPU uuid's temperature and power readings for every process sharing Dir; nil
// returns them to the simulated defaults.
func (s *Simulated) SetSensors(uuid string, r *SimSensors) error {
	return setPinned(s, uuid, simSensorsFile, r, SimSensors.check, func(r SimSensors) string {
		return fmt.Sprintf("%d %d %d\n", r.TemperatureC, r.Power.UsageMilliwatts, r.Power.LimitMilliwatts)
	})
}

func (r SimSensors) check() error {
	if r.TemperatureC < -100 || r.TemperatureC > 200 {
		return fmt.Errorf("temperature %d C is not a reading a GPU gives", r.TemperatureC)
	}
	return nil
}

// SetSensorFault makes one sensor's query (SensorTemperature, SensorPower or SensorGPM) of GPU uuid fail
// with msg, as NVML does when a query errors, until it is called with an empty msg.
func (s *Simulated) SetSensorFault(uuid, sensor, msg string) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	if sensor != SensorTemperature && sensor != SensorPower && sensor != SensorGPM {
		return fmt.Errorf("simulated GPU %s: no sensor %q (want %q, %q or %q)", uuid, sensor, SensorTemperature, SensorPower, SensorGPM)
	}
	path := filepath.Join(s.dir, uuid, sensor+"-fault")
	if msg == "" {
		return removeIfPresent(path)
	}
	return writeFileAtomic(path, []byte(msg+"\n"))
}

// Temperature implements Backend: pinned, else SimBusyTemperature while a process computes and
// SimIdleTemperature otherwise.
func (s *Simulated) Temperature(ctx context.Context, uuid string) (int, error) {
	pinned, busy, err := s.sensors(ctx, uuid, SensorTemperature)
	if err != nil {
		return 0, err
	}
	switch {
	case pinned != nil:
		return pinned.TemperatureC, nil
	case busy:
		return SimBusyTemperature, nil
	}
	return SimIdleTemperature, nil
}

// Power implements Backend: pinned, else a share of the model's SimPowerLimit (more while a
// process computes).
func (s *Simulated) Power(ctx context.Context, uuid string) (Power, error) {
	pinned, busy, err := s.sensors(ctx, uuid, SensorPower)
	if err != nil {
		return Power{}, err
	}
	if pinned != nil {
		return pinned.Power, nil
	}
	d, _ := s.device(uuid)
	limit := SimPowerLimit(d.Model)
	pct := uint32(simIdlePowerPct)
	if busy {
		pct = simBusyPowerPct
	}
	return Power{UsageMilliwatts: limit / 100 * pct, LimitMilliwatts: limit}, nil
}

// sensors reads one sensor's injected fault, the pinned readings and whether a process computes.
func (s *Simulated) sensors(ctx context.Context, uuid, sensor string) (*SimSensors, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if _, err := s.device(uuid); err != nil {
		return nil, false, err
	}
	// Before the pinned readings: a lost GPU answers nothing, whatever a test pinned on it.
	if err := s.lost(uuid); err != nil {
		return nil, false, err
	}
	dir := filepath.Join(s.dir, uuid)
	if fault, err := os.ReadFile(filepath.Join(dir, sensor+"-fault")); err == nil {
		return nil, false, fmt.Errorf("simulated NVML error on GPU %s: %s: %s", uuid, sensor, strings.TrimSpace(string(fault)))
	}
	data, err := os.ReadFile(filepath.Join(dir, simSensorsFile))
	switch {
	case err == nil:
		r, perr := parseSensors(string(data))
		if perr != nil {
			return nil, false, fmt.Errorf("simulated GPU %s: %s: %w", uuid, simSensorsFile, perr)
		}
		return &r, false, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, false, fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	procs, err := s.live(ctx, uuid)
	if err != nil {
		return nil, false, err
	}
	for _, p := range procs {
		if p.busy {
			return nil, true, nil
		}
	}
	return nil, false, nil
}

// parseSensors reads "<temperature C> <usage mW> <limit mW>".
func parseSensors(s string) (SimSensors, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return SimSensors{}, fmt.Errorf("want 3 fields, got %q", s)
	}
	temp, err1 := strconv.Atoi(f[0])
	usage, err2 := strconv.ParseUint(f[1], 10, 32)
	limit, err3 := strconv.ParseUint(f[2], 10, 32)
	if err := errors.Join(err1, err2, err3); err != nil {
		return SimSensors{}, fmt.Errorf("malformed readings %q: %w", s, err)
	}
	return SimSensors{TemperatureC: temp, Power: Power{UsageMilliwatts: uint32(usage), LimitMilliwatts: uint32(limit)}}, nil
}

func removeIfPresent(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
