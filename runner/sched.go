package runner

import (
	"maps"
	"slices"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// jobState is one job's progress through the run.
type jobState struct {
	queue.Job
	idx      int
	attempts int
	// whole is set after a cap violation: the job's next attempt has a GPU to itself.
	whole bool
	// collateral counts its failures that a GPU-wide event explained (each one re-runs it).
	collateral int
	// retries counts the times the admission rule started it again after a failure
	// (Admission.Retries).
	retries int
	running bool
	done    bool
	final   record.Outcome // outcome of the last attempt once done, or exhausted
	// The ladder (ladder.go): the bound on attempts, whether the cap is a ceiling, the
	// guarantee the next attempt was promised (0: the template's), what was announced before
	// it, why the job was stopped, and how many probe windows the runner ended (not counted).
	maxAttempts int
	capFixed    bool
	room        size.Bytes
	next        policy.Step
	reason      string
	probeStops  int
}

type needKind int

const (
	needWait   needKind = iota // its template's probe is still running
	needCapped                 // a cap that must fit next to others
	needWhole                  // the whole GPU, alone (a re-run after a violation, or the rule's)
	needProbe                  // alone, to measure the template
	needSlot                   // a place beside others on the admission rule's terms (Admission.Share)
)

// launch is one admission decision: a job, the GPU and the reservation it holds.
type launch struct {
	job    *jobState
	gpu    string
	res    ledger.Reservation
	capped bool // the cap is enforced (packed and static arms)
	whole  bool
	probe  bool
	window time.Duration
	// inPlace marks a probe that runs beside other jobs under a protective cap (half the GPU's
	// budget, or its template's probe_cap) and, when its window ends, goes on under the cap its
	// footprint earned; or, when it borrows, on its small guarantee and what it borrows.
	inPlace bool
	// borrowing: the job may use memory no other job's guarantee covers, up to the GPU's budget.
	borrowing bool
}

// sched decides which jobs start where. It touches the ledger but no processes, so its cost is
// measured apart (BenchmarkAdmitQueue). It is used from one goroutine.
type sched struct {
	// adm replaces the packed rule with one of the benchmark's (Admission); nil: packed.
	adm       Admission
	pol       policy.Policy
	led       *ledger.Ledger
	gpus      []string
	perGPU    int
	maxTotal  int
	jobs      []*jobState
	templates map[string]queue.TemplateSpec
	// peaks are the footprints known now: stored profiles (warm), declared peaks, this run's
	// probes and violations.
	peaks    map[string]size.Bytes
	prober   map[string]*jobState // template -> the job probing it
	window   time.Duration        // default probe window
	probeCap size.Bytes           // default protective cap of in-place probes (0: half the budget)
	running  map[string]int       // per GPU
	wholeOn  map[string]bool      // a job with the whole GPU runs there
	drainFor map[string]*jobState // GPU -> the job waiting for it to empty
	total    int
	log      hclog.Logger
	warned   map[string]bool
	// ledgerErr is the last reservation the ledger failed to record (not a denial), until one
	// is recorded again.
	ledgerErr error
	// probeInPlace lets probes run beside other jobs (packed arm, isolated mode): the watchdog
	// stops a probe that outgrows its protective cap and harms no neighbour. Under MPS a stop
	// is a GPU-wide event, so probes there run alone.
	probeInPlace bool
	// node admits every job (borrow.go, reserve); borrows lets packed jobs borrow past their
	// caps there; frozen are the GPUs where an allocation waits for borrowed memory, as of the
	// last round.
	node    *node.Node
	borrows bool
	frozen  map[string]bool
	// refused are the fence's refusals of a guarantee (place) per GPU, as of the last round:
	// what a run stuck with nothing running waits for.
	refused map[string]error
	// grown are the guarantees the ladder raised templates to in this run (ladder.go).
	grown map[string]size.Bytes
}

// schedConfig is what a scheduler is built from; the run fills it once, and from then on the
// scheduler changes only through its methods (next, finished, learned, recapped, ...).
type schedConfig struct {
	// Admission replaces the packed rule; nil: packed.
	Admission Admission
	Policy    policy.Policy
	Ledger    *ledger.Ledger
	GPUs      []string
	// MaxTotal bounds the jobs running at once on all GPUs; 0 = the arm's rule.
	MaxTotal int
	Logger   hclog.Logger
	// Window and ProbeCap are the run's default probe window and protective cap.
	Window   time.Duration
	ProbeCap size.Bytes
	// ProbeInPlace lets probes run beside other jobs (sched.probeInPlace).
	ProbeInPlace bool
	// Node admits the jobs; Borrows lets packed jobs borrow past their caps there.
	Node    *node.Node
	Borrows bool
	// Templates are the queue's template specs; Peaks the footprints known before the run
	// (declared peaks, stored profiles).
	Templates map[string]queue.TemplateSpec
	Peaks     map[string]size.Bytes
}

// newSchedFrom builds the scheduler of a run.
func newSchedFrom(c schedConfig, jobs []*jobState) *sched {
	s := newSched(c.Policy, c.Ledger, c.GPUs, jobs, c.MaxTotal, c.Logger)
	s.window, s.probeCap, s.probeInPlace = c.Window, c.ProbeCap, c.ProbeInPlace
	if c.Node != nil {
		s.node, s.borrows = c.Node, c.Borrows
	}
	if s.adm = c.Admission; s.adm != nil {
		s.perGPU = s.adm.PerGPU(c.Policy.MaxTasksPerGPU)
	}
	maps.Copy(s.templates, c.Templates)
	maps.Copy(s.peaks, c.Peaks)
	return s
}

// newSched is a scheduler with the packed rule, no lender and no hold.
func newSched(pol policy.Policy, led *ledger.Ledger, gpus []string, jobs []*jobState, maxTotal int, log hclog.Logger) *sched {
	return &sched{
		pol: pol, led: led, gpus: gpus, jobs: jobs, maxTotal: maxTotal, log: log, perGPU: pol.MaxTasksPerGPU,
		templates: map[string]queue.TemplateSpec{}, peaks: map[string]size.Bytes{},
		prober: map[string]*jobState{}, running: map[string]int{}, wholeOn: map[string]bool{},
		drainFor: map[string]*jobState{}, warned: map[string]bool{}, frozen: map[string]bool{}, refused: map[string]error{}, grown: map[string]size.Bytes{},
		node: node.New(led, nil, node.Config{Logger: log}),
	}
}

// capOf is the cap a job of template t gets, when its footprint is known.
func (s *sched) capOf(t string) (size.Bytes, bool) {
	if spec, ok := s.templates[t]; ok && spec.CapBytes > 0 {
		return spec.CapBytes, true
	}
	if p, ok := s.peaks[t]; ok {
		// A footprint of 0 is known too: a probe that saw no GPU memory (loop.go, learn).
		return s.pol.Cap(p), true
	}
	return 0, false
}

func (s *sched) need(j *jobState, maxBudget size.Bytes) (needKind, size.Bytes) {
	if s.adm != nil {
		if s.adm.Alone(j.whole) {
			return needWhole, 0
		}
		return needSlot, 0
	}
	if j.whole {
		return needWhole, 0
	}
	if j.room > 0 {
		if j.room > maxBudget {
			return needWhole, 0
		}
		return needCapped, j.room
	}
	if c, ok := s.capFor(j); ok {
		if c > maxBudget {
			if !s.warned[j.Template] {
				s.warned[j.Template] = true
				s.log.Warn("cap is larger than any GPU's budget: its jobs run alone with the whole GPU",
					"template", j.Template, "cap", c.String(), "largest_budget", maxBudget.String())
			}
			return needWhole, 0
		}
		return needCapped, c
	}
	if p, ok := s.prober[j.Template]; ok && p != j {
		return needWait, 0
	}
	return needProbe, 0
}

// wholeBytes is the largest cap the ledger can grant on a GPU: its budget in whole units.
func wholeBytes(g ledger.GPUState) size.Bytes {
	return size.Bytes(g.Units) * g.UnitBytes
}

// next admits every job that can start now, in queue order with backfill: a job that does not
// fit is skipped and later jobs may start, but a job that needs a whole GPU drains one (no new
// admissions there) so it cannot be starved.
func (s *sched) next() []launch {
	states := map[string]ledger.GPUState{}
	var maxBudget size.Bytes
	for _, g := range s.led.States() {
		states[g.UUID] = g
	}
	s.lend(states)
	for _, u := range s.gpus {
		maxBudget = max(maxBudget, wholeBytes(states[u]))
	}
	var out []launch
	for _, j := range s.jobs {
		if j.done || j.running {
			continue
		}
		if s.maxTotal > 0 && s.total >= s.maxTotal {
			break
		}
		kind, capBytes := s.need(j, maxBudget)
		switch kind {
		case needWait:
			continue
		case needProbe, needWhole:
			if kind == needProbe {
				s.prober[j.Template] = j
				if s.borrows {
					if l, ok := s.probeBorrowing(j, states); ok {
						s.start(&l)
						out = append(out, l)
					}
					continue
				}
				if s.probeInPlace {
					if l, ok := s.probeBeside(j, states); ok {
						s.start(&l)
						out = append(out, l)
					}
					continue
				}
			}
			if kind == needWhole && j.whole && s.sharedPending(j, maxBudget) {
				// A re-run alone waits until the rest of the queue is admitted: the GPU then
				// drains once, at the end, instead of idling half-empty in the middle.
				continue
			}
			g := s.drainTarget(j, states)
			if g == "" || s.running[g] > 0 {
				continue
			}
			res, err := s.reserve(g, wholeBytes(states[g]), j, false)
			if err != nil {
				continue
			}
			delete(s.drainFor, g)
			l := launch{job: j, gpu: g, res: res, whole: true, capped: s.capsAlone(states[g])}
			if kind == needProbe {
				l.probe = true
				l.window = s.probeWindow(j.Template)
			}
			s.start(&l)
			out = append(out, l)
		case needCapped, needSlot:
			for _, g := range s.candidates(states) {
				st := states[g]
				c, capped := capBytes, true
				if kind == needSlot {
					c, capped = s.adm.Share(st)
				}
				var res ledger.Reservation
				if !capped && c == 0 {
					// A rule without caps holds no ledger reservation: it has nothing to account.
					res = ledger.Reservation{GPU: g, CapBytes: wholeBytes(st)}
				} else {
					var ok bool
					// Only the packed rule's jobs borrow: a baseline's share is all it gets.
					if res, ok = s.admit(g, c, j, states, kind == needCapped); !ok {
						continue
					}
				}
				l := launch{job: j, gpu: g, res: res, capped: capped, borrowing: res.LimitBytes > res.CapBytes}
				s.start(&l)
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// capsAlone says whether a job alone on a GPU in state st runs under a cap of its whole budget:
// always with the packed rule; with another, when its shares are caps.
func (s *sched) capsAlone(st ledger.GPUState) bool {
	if s.adm == nil {
		return true
	}
	_, capped := s.adm.Share(st)
	return capped
}

// candidates are the GPUs that take a shared job now, most free budget first.
func (s *sched) candidates(states map[string]ledger.GPUState) []string {
	var out []string
	for _, g := range s.gpus {
		st := states[g]
		if s.drainFor[g] != nil || s.wholeOn[g] || s.running[g] >= s.perGPU || !st.Healthy || s.frozen[g] {
			continue
		}
		out = append(out, g)
	}
	free := func(g string) size.Bytes {
		st := states[g]
		if st.ReservedBytes > st.BudgetBytes {
			return 0
		}
		return st.BudgetBytes - st.ReservedBytes
	}
	slices.SortStableFunc(out, func(a, b string) int {
		fa, fb := free(a), free(b)
		switch {
		case fa > fb:
			return -1
		case fa < fb:
			return 1
		}
		return s.running[a] - s.running[b]
	})
	return out
}

// drainTarget is the GPU a job that needs a whole GPU waits for: the one already drained for it,
// else an idle GPU, else the busy GPU with the fewest jobs (drained from now on). An unhealthy GPU
// (the enforcer marked it after a GPU-wide event) is not picked anew; one drained already stays
// the target, and the ledger refuses the reservation there until it is healthy again.
func (s *sched) drainTarget(j *jobState, states map[string]ledger.GPUState) string {
	for _, g := range s.gpus {
		if s.drainFor[g] == j {
			return g
		}
	}
	best := ""
	for _, g := range s.gpus {
		if s.drainFor[g] != nil || s.wholeOn[g] || !states[g].Healthy || s.frozen[g] {
			continue
		}
		if s.running[g] == 0 {
			return g
		}
		if best == "" || s.running[g] < s.running[best] {
			best = g
		}
	}
	if best != "" {
		s.drainFor[best] = j
		s.log.Debug("draining a GPU for a job that runs alone", "gpu", best, "job", j.Name)
	}
	return best
}

// admit reserves c for j on GPU g when it fits beside what states[g] holds, letting it borrow
// when borrow is set and the run borrows, and counts it in states.
func (s *sched) admit(g string, c size.Bytes, j *jobState, states map[string]ledger.GPUState, borrow bool) (ledger.Reservation, bool) {
	st := states[g]
	if c+st.ReservedBytes > st.BudgetBytes {
		return ledger.Reservation{}, false
	}
	res, err := s.reserve(g, c, j, borrow)
	if err != nil {
		return ledger.Reservation{}, false
	}
	st.ReservedBytes += res.CapBytes
	states[g] = st
	return res, true
}

func (s *sched) start(l *launch) {
	l.job.running = true
	s.running[l.gpu]++
	s.total++
	if l.whole {
		s.wholeOn[l.gpu] = true
	}
}

// finished returns a launch's slot; the caller releases the reservation.
func (s *sched) finished(l *launch) {
	l.job.running = false
	s.running[l.gpu]--
	s.total--
	if l.whole {
		s.wholeOn[l.gpu] = false
	}
}

func (s *sched) probeWindow(t string) time.Duration {
	if spec, ok := s.templates[t]; ok && spec.ProbeWindow > 0 {
		return spec.ProbeWindow
	}
	return s.window
}

// probeBeside starts a probe next to the jobs already running, under a protective cap of half
// the GPU's budget (or the template's probe_cap): enough for any job that packs at all, and it
// leaves room for a second probe or for jobs whose caps are known. A job that needs more is
// stopped at that cap and re-run alone, like any job that breaks its cap. The probe waits for
// that much to be free, and admissions on its GPU stop meanwhile (as for a job that needs the
// GPU alone), so it is never starved by later jobs yet never waits for the GPU to empty.
func (s *sched) probeBeside(j *jobState, states map[string]ledger.GPUState) (launch, bool) {
	g := s.drainTarget(j, states)
	if g == "" || s.running[g] >= s.perGPU {
		return launch{}, false
	}
	st := states[g]
	protective := s.protectiveCap(j.Template, st)
	if protective == 0 || st.ReservedBytes+protective > st.BudgetBytes {
		return launch{}, false
	}
	res, err := s.reserve(g, protective, j, false)
	if err != nil {
		return launch{}, false
	}
	delete(s.drainFor, g)
	st.ReservedBytes += res.CapBytes
	states[g] = st
	return launch{job: j, gpu: g, res: res, capped: true, probe: true, inPlace: true, window: s.probeWindow(j.Template)}, true
}

// probeBorrowing starts a probe like any job with a known cap, on a small guarantee
// (probeGuarantee) and a limit of the GPU's budget: it measures its footprint on memory nobody
// was promised, so it holds back no job whose footprint is known.
func (s *sched) probeBorrowing(j *jobState, states map[string]ledger.GPUState) (launch, bool) {
	for _, g := range s.candidates(states) {
		res, ok := s.admit(g, s.probeGuarantee(states[g]), j, states, true)
		if !ok {
			continue
		}
		return launch{job: j, gpu: g, res: res, capped: true, probe: true, inPlace: true, borrowing: true,
			window: s.probeWindow(j.Template)}, true
	}
	return launch{}, false
}

// protectiveCap is what an in-place probe of template t reserves on a GPU in state st: the
// template's probe_cap, else the run's, in whole units, else half the budget; never more than
// the budget, so a probe_cap too large for this GPU makes the probe hold it whole rather than
// never start.
func (s *sched) protectiveCap(t string, st ledger.GPUState) size.Bytes {
	want := s.probeCap
	if spec, ok := s.templates[t]; ok && spec.ProbeCapBytes > 0 {
		want = spec.ProbeCapBytes
	}
	units := st.Units / 2
	if want > 0 && st.UnitBytes > 0 {
		units = int((want + st.UnitBytes - 1) / st.UnitBytes)
		if units > st.Units {
			if !s.warned["probe_cap/"+t] {
				s.warned["probe_cap/"+t] = true
				s.log.Warn("probe_cap is larger than the GPU's budget: the probe holds the whole budget",
					"template", t, "probe_cap", want.String(), "budget", st.BudgetBytes.String())
			}
			units = st.Units
		}
	}
	return size.Bytes(units) * st.UnitBytes
}

// sharedPending is true while a job other than j waits for admission beside others (or for a
// probe that will give it a cap): a re-run that needs a whole GPU goes after them.
func (s *sched) sharedPending(j *jobState, maxBudget size.Bytes) bool {
	for _, o := range s.jobs {
		if o == j || o.done || o.running || o.whole {
			continue
		}
		if kind, _ := s.need(o, maxBudget); kind != needWhole {
			return true
		}
	}
	return false
}

// learned records a template's footprint, measured by a probe: its jobs are admitted under the
// cap it earns from now on, and nobody probes it any more.
func (s *sched) learned(t string, peak size.Bytes) { s.peaks[t] = peak }

// raised records that a template needs at least peak (a broken cap, a re-run alone): the
// footprint only ever goes up this way.
func (s *sched) raised(t string, peak size.Bytes) { s.peaks[t] = max(s.peaks[t], peak) }

// probeEnded frees template t for a new probe if j was probing it.
func (s *sched) probeEnded(t string, j *jobState) {
	if s.prober[t] == j {
		delete(s.prober, t)
	}
}

// recapped records the footprint an in-place probe showed in its window: the template's other
// jobs are admitted under the cap it earned, while the probe itself runs on under that cap.
func (s *sched) recapped(l *launch, res ledger.Reservation, peak size.Bytes) {
	s.learned(l.job.Template, peak)
	s.probeEnded(l.job.Template, l.job)
	l.res = res
}
