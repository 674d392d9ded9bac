//go:build linux && cgo

package gpu

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
)

// eventWaitMillis bounds one EventSet.Wait, and so how long Close waits for the watch to end: a
// Wait in progress cannot be interrupted, and the event set must not be freed (nor NVML shut
// down) under it.
const eventWaitMillis = 200

// watchedEvents are the NVML events that can take a GPU out of service.
const watchedEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)

// eventRetry is how long the watch pauses after a Wait that failed for another reason than its
// timeout, so that a persistent failure (a GPU lost mid-wait) is not a busy loop.
const eventRetry = time.Second

// eventWatch waits for the XID and ECC events of the GPUs present at Open in one goroutine and
// turns each into a sticky mark that describe reports.
type eventWatch struct {
	logger hclog.Logger
	set    nvml.EventSet
	// uuids are the registered handles: an event names its GPU by handle, and a GPU that fell
	// off the bus may no longer answer GetUUID. Written only before run starts.
	uuids   map[nvml.Device]string
	ignored map[uint64]bool
	marks   *healthMarks
	now     func() time.Time
	retry   time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func newEventWatch(logger hclog.Logger, set nvml.EventSet, marks *healthMarks, opts HealthOptions) *eventWatch {
	return &eventWatch{logger: logger, set: set, uuids: map[nvml.Device]string{}, ignored: xidSet(opts.IgnoredXIDs),
		marks: marks, now: time.Now, retry: eventRetry, stop: make(chan struct{}), done: make(chan struct{})}
}

// startEventWatch registers every GPU for the events that mark it and starts waiting for them.
// It returns nil when no GPU can report events: health then comes from queries alone, which the
// log says once per GPU.
func startEventWatch(logger hclog.Logger, marks *healthMarks, opts HealthOptions) *eventWatch {
	set, ret := nvml.EventSetCreate()
	if ret != nvml.SUCCESS {
		logger.Warn("cannot create an NVML event set: GPU health comes from queries alone, XID and ECC events are not seen",
			"error", ret.Error())
		return nil
	}
	w := newEventWatch(logger, set, marks, opts)
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		count = 0
	}
	for i := range count {
		// A GPU that cannot be opened or named is reported unhealthy by describe already.
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
			w.register(h, uuid)
		}
	}
	if len(w.uuids) == 0 {
		set.Free()
		return nil
	}
	go w.run()
	return w
}

// register asks for h's events; a GPU or driver that has none is logged and left to queries.
func (w *eventWatch) register(h nvml.Device, uuid string) {
	mask := watchedEvents
	supported, ret := h.GetSupportedEventTypes()
	if ret == nvml.SUCCESS {
		mask &= supported
	}
	if ret == nvml.SUCCESS && mask != 0 {
		ret = h.RegisterEvents(mask, w.set)
	}
	switch {
	case ret == nvml.SUCCESS && mask != 0:
		w.uuids[h] = uuid
		if mask&nvml.EventTypeXidCriticalError == 0 {
			w.logger.Warn("GPU reports ECC events but no XIDs: a critical XID will not mark it unhealthy", "gpu", uuid)
		}
	case ret == nvml.SUCCESS || unanswered(ret):
		w.logger.Warn("GPU cannot report XID or ECC events: its health comes from queries alone", "gpu", uuid,
			"supported_events", supported)
	default:
		w.logger.Warn("cannot register for the GPU's XID and ECC events: its health comes from queries alone", "gpu", uuid,
			"error", ret.Error())
	}
}

// run waits for events until close. Each Wait is bounded so that close is seen within
// eventWaitMillis.
func (w *eventWatch) run() {
	defer close(w.done)
	failed := nvml.SUCCESS
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		e, ret := w.set.Wait(eventWaitMillis)
		switch ret {
		case nvml.SUCCESS:
			failed = nvml.SUCCESS
			w.handle(w.uuidOf(e.Device), e.EventType, e.EventData)
		case nvml.ERROR_TIMEOUT:
		default:
			if ret != failed {
				w.logger.Warn("waiting for GPU events failed: XID and ECC events may be missed until it works again",
					"error", ret.Error(), "retry", w.retry)
			}
			failed = ret
			select {
			case <-w.stop:
				return
			case <-time.After(w.retry):
			}
		}
	}
}

// close ends the watch and frees its event set; NVML may be shut down after it returns.
func (w *eventWatch) close() {
	if w == nil {
		return
	}
	close(w.stop)
	<-w.done
	if ret := w.set.Free(); ret != nvml.SUCCESS {
		w.logger.Warn("cannot free the NVML event set", "error", ret.Error())
	}
}

func (w *eventWatch) uuidOf(d nvml.Device) string {
	if d == nil {
		return ""
	}
	if u, ok := w.uuids[d]; ok {
		return u
	}
	if u, ret := d.GetUUID(); ret == nvml.SUCCESS {
		return u
	}
	return ""
}

// healthEventOf reads one NVML event; false for an event that says nothing of health.
func healthEventOf(eventType, data uint64, at time.Time) (HealthEvent, bool) {
	switch {
	case eventType&nvml.EventTypeXidCriticalError != 0:
		return HealthEvent{Kind: EventXID, XID: data, At: at}, true
	case eventType&nvml.EventTypeDoubleBitEccError != 0:
		return HealthEvent{Kind: EventDoubleBitECC, At: at}, true
	}
	return HealthEvent{}, false
}

// handle marks the GPU an event came from when the event takes it out of service, and logs
// every event that says something of health: an application's XID is worth a line, since it
// is often the first sign of a job's own bug.
func (w *eventWatch) handle(uuid string, eventType, data uint64) {
	ev, ok := healthEventOf(eventType, data, w.now())
	if !ok {
		return
	}
	if uuid == "" {
		w.logger.Error("GPU event from a GPU that cannot be named: no GPU is marked unhealthy for it",
			"event_type", eventType, "data", data)
		return
	}
	reason := markOf(ev, w.ignored)
	switch {
	case reason == "" && ClassifyXID(ev.XID) == XIDApplication:
		w.logger.Info("XID of an application's own fault: the GPU stays in service", "gpu", uuid, "xid", ev.XID,
			"what", XIDName(ev.XID))
	case reason == "":
		w.logger.Warn("critical XID the configuration ignores: the GPU stays in service", "gpu", uuid, "xid", ev.XID,
			"what", XIDName(ev.XID))
	case w.marks.set(uuid, eventMark{reason: reason, at: ev.At}):
		w.logger.Error("GPU marked unhealthy: nothing new is placed on it until it is reset and gpufrac restarts",
			"gpu", uuid, "reason", reason)
	default:
		w.logger.Warn("another critical event on a GPU already marked unhealthy", "gpu", uuid, "event", reason,
			"mark", w.marks.get(uuid).reason)
	}
}

// unanswered is a query the GPU or driver does not answer at all (too old a GPU, too old a
// driver, a feature that is off), as opposed to one that failed.
func unanswered(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND || ret == nvml.ERROR_NO_PERMISSION
}

// memoryErrors reads what the GPU's memory says of itself. A query the GPU does not answer is
// skipped (no row remapper before Ampere, no ECC counters with ECC off); a failed one is
// returned with what was asked.
func memoryErrors(h nvml.Device) (MemoryErrors, string, nvml.Return) {
	var m MemoryErrors
	_, _, pending, failed, ret := h.GetRemappedRows()
	switch {
	case ret == nvml.SUCCESS:
		m.RemapPending, m.RemapFailed = pending, failed
	case !unanswered(ret):
		return m, "cannot read the remapped rows", ret
	}
	n, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	switch {
	case ret == nvml.SUCCESS:
		m.Uncorrectable = n
	case !unanswered(ret):
		return m, "cannot read the uncorrectable ECC error count", ret
	}
	return m, "", nvml.SUCCESS
}
