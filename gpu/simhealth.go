package gpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// simEventsFile, in a simulated GPU's directory, logs the health events raised on it, one a line:
// "<unix nanoseconds> xid <code>" or "<unix nanoseconds> dbe". It is appended to, never
// rewritten, so that every process sharing Dir sees every event.
const simEventsFile = "events"

// simMemoryFile pins what the GPU's memory says of itself: "<uncorrectable> <remap pending 0|1>
// <remap failed 0|1>".
const simMemoryFile = "memory-errors"

// RaiseXID makes GPU uuid raise XID code, as the driver does on a fault. Each handle on the
// simulated GPUs (each process sharing Dir) that was open before the event sees it and marks the
// GPU as the NVML backend does: by ClassifyXID and its own HealthOptions, the first mark sticky
// for the handle's life. A handle opened after the event does not see it, as a gpufrac process
// started after an XID does not.
func (s *Simulated) RaiseXID(uuid string, code uint64) error {
	if code == 0 {
		return fmt.Errorf("simulated GPU %s: XID 0 does not exist (XIDs start at 1)", uuid)
	}
	return s.raise(uuid, "xid "+strconv.FormatUint(code, 10))
}

// RaiseDoubleBitECC makes GPU uuid report an uncorrectable (double-bit) ECC error, the event
// NVML delivers apart from XIDs; seen as RaiseXID's events are.
func (s *Simulated) RaiseDoubleBitECC(uuid string) error { return s.raise(uuid, "dbe") }

func (s *Simulated) raise(uuid, what string) error {
	if _, err := s.device(uuid); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(s.dir, uuid, simEventsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	// One write of a whole line: concurrent raisers' lines do not interleave.
	_, werr := f.WriteString(strconv.FormatInt(time.Now().UnixNano(), 10) + " " + what + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	return nil
}

// SetMemoryErrors pins what GPU uuid's memory says of itself (uncorrectable ECC errors since
// the driver loaded, a row remapping pending or failed) for every process sharing Dir; nil
// returns it to a clean memory. Unlike an event it is read afresh at each listing, as the NVML
// backend queries the driver's counters, so clearing it is a GPU reset.
func (s *Simulated) SetMemoryErrors(uuid string, m *MemoryErrors) error {
	return setPinned(s, uuid, simMemoryFile, m, func(MemoryErrors) error { return nil }, func(m MemoryErrors) string {
		return fmt.Sprintf("%d %d %d\n", m.Uncorrectable, b01(m.RemapPending), b01(m.RemapFailed))
	})
}

func b01(b bool) int {
	if b {
		return 1
	}
	return 0
}

// backendHealth is why GPU uuid is out of service by the rules the NVML backend applies (an
// event's sticky mark first, then its memory); no reason when it is in service.
func (s *Simulated) backendHealth(uuid string) (eventMark, error) {
	if mark, err := s.eventMark(uuid); err != nil || mark.reason != "" {
		return mark, err
	}
	m, err := s.memoryErrors(uuid)
	if err != nil {
		// Not a reading of 0: that would start a new baseline, and the count the GPU had all
		// along would drain it at the next good reading (the NVML backend returns here too).
		return eventMark{}, err
	}
	m.Uncorrectable = s.ecc.since(uuid, m.Uncorrectable)
	return eventMark{reason: m.reason()}, nil
}

// eventMark is the first mark of the events raised on uuid since this handle opened.
func (s *Simulated) eventMark(uuid string) (eventMark, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, uuid, simEventsFile))
	if errors.Is(err, os.ErrNotExist) {
		return eventMark{}, nil
	}
	if err != nil {
		return eventMark{}, err
	}
	lines := strings.Split(string(data), "\n")
	// The last piece is empty after the final newline, or a line a raiser is still writing.
	for _, line := range lines[:len(lines)-1] {
		ev, err := parseSimEvent(line)
		if err != nil {
			return eventMark{}, fmt.Errorf("%s: %w", simEventsFile, err)
		}
		if ev.At.Before(s.opened) {
			continue
		}
		if reason := markOf(ev, s.ignored); reason != "" {
			return eventMark{reason: reason, at: ev.At}, nil
		}
	}
	return eventMark{}, nil
}

func parseSimEvent(line string) (HealthEvent, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return HealthEvent{}, fmt.Errorf("malformed event %q", line)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return HealthEvent{}, fmt.Errorf("malformed event %q: %w", line, err)
	}
	at := time.Unix(0, ns)
	switch {
	case f[1] == "xid" && len(f) == 3:
		code, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return HealthEvent{}, fmt.Errorf("malformed event %q: %w", line, err)
		}
		return HealthEvent{Kind: EventXID, XID: code, At: at}, nil
	case f[1] == "dbe" && len(f) == 2:
		return HealthEvent{Kind: EventDoubleBitECC, At: at}, nil
	}
	return HealthEvent{}, fmt.Errorf("malformed event %q", line)
}

func (s *Simulated) memoryErrors(uuid string) (MemoryErrors, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, uuid, simMemoryFile))
	if errors.Is(err, os.ErrNotExist) {
		return MemoryErrors{}, nil
	}
	if err != nil {
		return MemoryErrors{}, err
	}
	f := strings.Fields(string(data))
	if len(f) != 3 {
		return MemoryErrors{}, fmt.Errorf("%s: want 3 fields, got %q", simMemoryFile, data)
	}
	n, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil || (f[1] != "0" && f[1] != "1") || (f[2] != "0" && f[2] != "1") {
		return MemoryErrors{}, fmt.Errorf("%s: malformed %q", simMemoryFile, data)
	}
	return MemoryErrors{Uncorrectable: n, RemapPending: f[1] == "1", RemapFailed: f[2] == "1"}, nil
}
