package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
)

// DefaultGPMInterval is how often an arm's GPM is read: the period the H200 measurements of
// gpu-facts.md used, long enough for NVML's figures to be stable.
const DefaultGPMInterval = 500 * time.Millisecond

// minGPMPeriod is the shortest period the last read of an arm closes: NVML's GPM metrics need
// samples some 100 ms apart, and an arm can end just after a read.
const minGPMPeriod = 100 * time.Millisecond

// GPMSample is one GPM period of one GPU during an arm.
type GPMSample struct {
	GPU         string    `json:"gpu"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	SMUtil      float64   `json:"sm_util"`
	SMOccupancy float64   `json:"sm_occupancy"`
}

// gpmRecorder reads every GPU's performance monitor at a fixed interval while an arm runs.
type gpmRecorder struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples []GPMSample
	errs    []string
}

// startGPM opens a sampler on every healthy GPU of b and reads them every interval until the
// returned recorder is stopped. A GPU without GPM is noted, not fatal: its SM figures are then
// unknown. It returns nil when no GPU could be sampled, with the reasons.
func startGPM(ctx context.Context, b gpu.Backend, interval time.Duration) (*gpmRecorder, []string) {
	devs, err := b.Devices(ctx)
	if err != nil {
		return nil, []string{fmt.Sprintf("GPM: listing GPUs: %v", err)}
	}
	type open struct {
		uuid string
		s    gpu.GPMSampler
	}
	var samplers []open
	var notes []string
	for _, d := range devs {
		if !d.Healthy {
			continue
		}
		s, err := b.OpenGPM(ctx, d.UUID)
		if err != nil {
			notes = append(notes, fmt.Sprintf("GPM of %s: %v", d.UUID, err))
			continue
		}
		samplers = append(samplers, open{d.UUID, s})
	}
	if len(samplers) == 0 {
		return nil, notes
	}
	r := &gpmRecorder{stop: make(chan struct{}), done: make(chan struct{}), errs: notes}
	read := func() {
		for _, o := range samplers {
			g, err := o.s.Read(context.Background())
			r.mu.Lock()
			if err != nil {
				// One failed period leaves a gap that the coverage figure shows.
				if len(r.errs) < 20 {
					r.errs = append(r.errs, fmt.Sprintf("GPM of %s: %v", o.uuid, err))
				}
			} else {
				r.samples = append(r.samples, GPMSample{GPU: o.uuid, Start: g.Start, End: g.End, SMUtil: g.SMUtil, SMOccupancy: g.SMOccupancy})
			}
			r.mu.Unlock()
		}
	}
	go func() {
		defer close(r.done)
		defer func() {
			for _, o := range samplers {
				_ = o.s.Close()
			}
		}()
		t := time.NewTicker(interval)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-t.C:
				read()
				last = time.Now()
			case <-r.stop:
				// The last period, up to the arm's end, made long enough to be read.
				time.Sleep(min(interval, minGPMPeriod) - time.Since(last))
				read()
				return
			}
		}
	}()
	return r, nil
}

// finish stops the recorder and returns what it read and the errors it met.
func (r *gpmRecorder) finish() ([]GPMSample, []string) {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples, r.errs
}

// SMUse is how much of the SMs a stretch of time used, from GPM samples.
type SMUse struct {
	// Fraction is the mean SM activity (GPM SM util) over the time the samples cover, 0 to 1.
	Fraction float64 `json:"sm_active_fraction"`
	// ActiveSeconds is Fraction times the window times the GPUs sampled: the SM-active
	// GPU-seconds, the work the SMs did.
	ActiveSeconds float64 `json:"sm_active_seconds"`
	// Occupancy is the mean SM occupancy, 0 to 1.
	Occupancy float64 `json:"sm_occupancy"`
	// Coverage is the share of the window (times the GPUs) the samples cover: below 1 when
	// reads failed or sampling started late. The mean is over what was covered.
	Coverage float64 `json:"coverage"`
}

// SMUseOf is the SM use of [from, to] from samples: each sample's figures hold over its period,
// and only the part of a period inside the window counts. Zero when nothing covers the window.
func SMUseOf(samples []GPMSample, from, to time.Time) SMUse {
	if !to.After(from) {
		return SMUse{}
	}
	var covered, util, occ float64
	var gpus []string
	for _, s := range samples {
		lo, hi := maxTime(s.Start, from), minTime(s.End, to)
		if !hi.After(lo) {
			continue
		}
		d := hi.Sub(lo).Seconds()
		covered += d
		util += d * s.SMUtil / 100
		occ += d * s.SMOccupancy / 100
		if !slices.Contains(gpus, s.GPU) {
			gpus = append(gpus, s.GPU)
		}
	}
	if covered == 0 {
		return SMUse{}
	}
	window := to.Sub(from).Seconds() * float64(len(gpus))
	u := SMUse{Fraction: util / covered, Occupancy: occ / covered, Coverage: min(covered/window, 1)}
	u.ActiveSeconds = u.Fraction * window
	return u
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
