package sched

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

// Job is one job's progress through the run. The scheduler reads it to place the job; the
// runner writes what its attempts showed (their count, the ladder's next step, the end).
type Job struct {
	queue.Job
	Attempts int
	// Whole is set after a cap violation: the job's next attempt has a GPU to itself.
	Whole bool
	// Collateral counts its failures that a GPU-wide event explained (each one re-runs it).
	Collateral int
	// Retries counts the times the admission rule started it again after a failure
	// (Admission.Retries).
	Retries int
	Running bool
	Done    bool
	Final   record.Outcome // outcome of the last attempt once done, or exhausted
	// The ladder: whether the cap is a ceiling, the guarantee the next attempt was promised (0:
	// the template's), what was announced before it, why the job was stopped, and how many probe
	// windows the runner ended (not counted against its bound, maxAttempts).
	FixedCap   bool
	Room       size.Bytes
	Next       policy.Step
	Reason     string
	ProbeStops int
	// Unstages counts its staged starts stopped for a borrower (stage.go), not counted either.
	Unstages    int
	maxAttempts int
}

type needKind int

const (
	needWait   needKind = iota // its template's probe is still running
	needCapped                 // a cap that must fit next to others
	needWhole                  // the whole GPU, alone (a re-run after a violation, or the rule's)
	needProbe                  // alone, to measure the template
	needSlot                   // a place beside others on the admission rule's terms (Admission.Share)
)

// Launch is one admission decision: a job, the GPU and the reservation it holds.
type Launch struct {
	Job    *Job
	GPU    string
	Res    ledger.Reservation
	Capped bool // the cap is enforced (packed and static arms)
	Whole  bool
	Probe  bool
	Window time.Duration
	// InPlace marks a probe that runs beside other jobs under a protective cap (half the GPU's
	// budget, or its template's probe_cap) and, when its window ends, goes on under the cap its
	// footprint earned; or, when it borrows, on its small guarantee and what it borrows.
	InPlace bool
	// Borrowing: the job may use memory no other job's guarantee covers, up to the GPU's budget.
	Borrowing bool
	// SMDemand is what the job counts for against the compute budget while it runs (compute.go).
	SMDemand float64
	// Staged: the job starts on a small reservation and waits for its guarantee (stage.go).
	Staged bool
}

// Sched decides which jobs start where. It touches the ledger but no processes, so its cost is
// measured apart (BenchmarkAdmitQueue). It is used from one goroutine.
type Sched struct {
	// adm replaces the packed rule with one of the benchmark's (Admission); nil: packed.
	adm       Admission
	pol       policy.Policy
	led       *ledger.Ledger
	gpus      []string
	perGPU    int
	maxTotal  int
	jobs      []*Job
	templates map[string]queue.TemplateSpec
	// peaks are the footprints known now: stored profiles (warm), declared peaks, this run's
	// probes and violations.
	peaks    map[string]size.Bytes
	prober   map[string]*Job // template -> the job probing it
	window   time.Duration   // default probe window
	probeCap size.Bytes      // default protective cap of in-place probes (0: half the budget)
	running  map[string]int  // per GPU
	wholeOn  map[string]bool // a job with the whole GPU runs there
	drainFor map[string]*Job // GPU -> the job waiting for it to empty
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
	// grown are the guarantees the ladder raised templates to in this run (Grow).
	grown map[string]size.Bytes
	// smActive are the templates' measured SM demands (percent); smOn the demand running per
	// GPU (compute.go).
	smActive map[string]float64
	smOn     map[string]float64
	// stageMax is how many jobs may be staged on a GPU at once (0: none); staged their small
	// reservations, stageSeq the order they were staged in, unstaging those being stopped,
	// blocked since when a borrower's wait on a GPU is blocked by staged jobs alone (stage.go).
	stageMax  int
	staged    map[*Job]ledger.Reservation
	stageSeq  []*Job
	unstaging map[*Job]bool
	blocked   map[string]time.Time
	// stalled are the GPUs where a staged job's grant did not fit in the last Grants: no new
	// job is admitted there before it, as none overtakes a job that drains a GPU.
	stalled map[string]bool
	// noStage are the GPUs where a staged job was stopped for a wait that staged jobs alone
	// still block.
	noStage map[string]bool
	// blockSeen is blockedNow's reading of each GPU during a round of Next (nil outside one);
	// waitedAt when a round last saw each reservation's allocation wait in the fence (lately).
	blockSeen map[string]bool
	waitedAt  map[string]time.Time
	// probeKnown: Config.ProbeKnown.
	probeKnown bool
	// now is Config.Now; stagedAt when each staged job was staged (probeHeld).
	now      func() time.Time
	stagedAt map[*Job]time.Time
}

// Config is what a scheduler is built from; the run fills it once, and from then on the
// scheduler changes only through its methods (Next, Finished, Learned, Recapped, ...).
type Config struct {
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
	// ProbeInPlace lets probes run beside other jobs (Sched.probeInPlace).
	ProbeInPlace bool
	// Node admits the jobs; Borrows lets packed jobs borrow past their caps there.
	Node    *node.Node
	Borrows bool
	// Templates are the queue's template specs; Peaks the footprints known before the run
	// (declared peaks, stored profiles).
	Templates map[string]queue.TemplateSpec
	Peaks     map[string]size.Bytes
	// SMActive are the templates' SM-active shares alone known before the run (percent), for
	// the policy's compute budget (compute.go).
	SMActive map[string]float64
	// Stage is how many jobs may start staged on a GPU at once (stage.go); 0: none.
	Stage int
	// ProbeKnown guarantees a probe that borrows, where others already borrow, what the caps
	// known now suggest (probePrior); false: the small guarantee alone.
	ProbeKnown bool
	// Now is the run's clock (time.Now where nil): how long a probe has waited staged for
	// nobody to borrow (stage.go, probeHeld).
	Now func() time.Time
}

// New builds the scheduler of a run over its jobs (NewJobs). Without a Node it admits through
// a node of the ledger alone: no fence, nobody borrows.
func New(c Config, jobs []*Job) *Sched {
	s := &Sched{
		pol: c.Policy, led: c.Ledger, gpus: c.GPUs, jobs: jobs, maxTotal: c.MaxTotal, log: c.Logger, perGPU: c.Policy.MaxTasksPerGPU,
		window: c.Window, probeCap: c.ProbeCap, probeInPlace: c.ProbeInPlace, node: c.Node, borrows: c.Borrows,
		templates: maps.Clone(c.Templates), peaks: maps.Clone(c.Peaks), prober: map[string]*Job{}, running: map[string]int{},
		wholeOn: map[string]bool{}, drainFor: map[string]*Job{}, warned: map[string]bool{}, frozen: map[string]bool{}, waitedAt: map[string]time.Time{},
		refused: map[string]error{}, grown: map[string]size.Bytes{}, smActive: maps.Clone(c.SMActive), smOn: map[string]float64{},
		stageMax: c.Stage, staged: map[*Job]ledger.Reservation{}, unstaging: map[*Job]bool{}, blocked: map[string]time.Time{}, stalled: map[string]bool{},
		noStage: map[string]bool{}, probeKnown: c.ProbeKnown, now: c.Now, stagedAt: map[*Job]time.Time{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.smActive == nil {
		s.smActive = map[string]float64{}
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if s.node == nil {
		s.node, s.borrows = node.New(c.Ledger, nil, node.Config{Logger: s.log}), false
	}
	if s.templates == nil {
		s.templates = map[string]queue.TemplateSpec{}
	}
	if s.peaks == nil {
		s.peaks = map[string]size.Bytes{}
	}
	if s.adm = c.Admission; s.adm != nil {
		s.perGPU = s.adm.PerGPU(c.Policy.MaxTasksPerGPU)
	}
	return s
}

// GPUs are the GPUs the scheduler places jobs on; Jobs the queue's jobs, in order.
func (s *Sched) GPUs() []string { return s.gpus }

// Jobs are the queue's jobs, in queue order.
func (s *Sched) Jobs() []*Job { return s.jobs }

// CapOf is the cap a job of template t gets, when its footprint is known.
func (s *Sched) CapOf(t string) (size.Bytes, bool) {
	if spec, ok := s.templates[t]; ok && spec.CapBytes > 0 {
		return spec.CapBytes, true
	}
	if p, ok := s.peaks[t]; ok {
		// A footprint of 0 is known too: a probe that saw no GPU memory (the runner's learn).
		return s.pol.Cap(p), true
	}
	return 0, false
}

func (s *Sched) need(j *Job, maxBudget size.Bytes) (needKind, size.Bytes) {
	if s.adm != nil {
		if s.adm.Alone(j.Whole) {
			return needWhole, 0
		}
		return needSlot, 0
	}
	if j.Whole {
		return needWhole, 0
	}
	if j.Room > 0 {
		if j.Room > maxBudget {
			return needWhole, 0
		}
		return needCapped, j.Room
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

// WholeBytes is the largest cap the ledger can grant on a GPU: its budget in whole units.
func WholeBytes(g ledger.GPUState) size.Bytes {
	return size.Bytes(g.Units) * g.UnitBytes
}

// Next admits every job that can start now, in queue order with backfill: a job that does not
// fit is skipped and later jobs may start, but a job that needs a whole GPU drains one (no new
// admissions there) so it cannot be starved.
func (s *Sched) Next() []Launch {
	s.blockSeen = map[string]bool{}
	defer func() { s.blockSeen = nil }()
	states := map[string]ledger.GPUState{}
	var maxBudget size.Bytes
	for _, g := range s.led.States() {
		states[g.UUID] = g
	}
	s.lend(states)
	for _, u := range s.gpus {
		maxBudget = max(maxBudget, WholeBytes(states[u]))
	}
	var out []Launch
	var waiting []waitingJob
	for _, j := range s.jobs {
		if j.Done || j.Running {
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
					} else {
						waiting = append(waiting, waitingJob{job: j, probe: true})
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
			if kind == needWhole && j.Whole && s.sharedPending(j, maxBudget) {
				// A re-run alone waits until the rest of the queue is admitted: the GPU then
				// drains once, at the end, instead of idling half-empty in the middle.
				continue
			}
			// The GPU alone is the most room there is: the largest of the run's GPUs. A probe (or a
			// baseline's job, alone by its rule) takes any.
			var least size.Bytes
			if kind == needWhole && (s.adm == nil || j.Whole) {
				least = maxBudget
			}
			g := s.drainTarget(j, states, least)
			if g == "" || s.running[g] > 0 {
				continue
			}
			res, err := s.reserve(g, WholeBytes(states[g]), j, false)
			if err != nil {
				continue
			}
			delete(s.drainFor, g)
			l := Launch{Job: j, GPU: g, Res: res, Whole: true, Capped: s.capsAlone(states[g])}
			if kind == needProbe {
				l.Probe = true
				l.Window = s.probeWindow(j.Template)
			}
			s.start(&l)
			out = append(out, l)
		case needCapped, needSlot:
			s.undrain(j)
			placed := false
			for _, g := range s.candidates(states, false) {
				if !s.smFits(g, j.Template) {
					continue
				}
				st := states[g]
				c, capped := capBytes, true
				if kind == needSlot {
					c, capped = s.adm.Share(st)
				}
				var res ledger.Reservation
				if !capped && c == 0 {
					// A rule without caps holds no ledger reservation: it has nothing to account.
					res = ledger.Reservation{GPU: g, CapBytes: WholeBytes(st)}
				} else {
					var ok bool
					// Only the packed rule's jobs borrow: a baseline's share is all it gets.
					if res, ok = s.admit(g, c, j, states, kind == needCapped); !ok {
						continue
					}
				}
				l := Launch{Job: j, GPU: g, Res: res, Capped: capped, Borrowing: res.LimitBytes > res.CapBytes}
				s.start(&l)
				out = append(out, l)
				placed = true
				break
			}
			if !placed && kind == needCapped {
				waiting = append(waiting, waitingJob{job: j, cap: capBytes})
			}
		}
	}
	// Staged last: a job that fits takes a slot before one that only starts up in it; and of
	// the staged, jobs whose caps are known before probes. In queue order a probe took the
	// slot of a known job behind it, which then started up unstaged and ended the simulator's
	// cold seed 2 2.0 s later; known first, the early-leaker scene ended 1.9 s sooner too
	// (docs/bench/packing-2026-12-05.md, "Staged probes, simulated").
	for _, probes := range []bool{false, true} {
		for _, w := range waiting {
			if w.probe != probes {
				continue
			}
			if s.maxTotal > 0 && s.total >= s.maxTotal {
				return out
			}
			if l, ok := s.stageJob(w, states); ok {
				s.start(&l)
				out = append(out, l)
			}
		}
	}
	return out
}

// capsAlone says whether a job alone on a GPU in state st runs under a cap of its whole budget:
// always with the packed rule; with another, when its shares are caps.
func (s *Sched) capsAlone(st ledger.GPUState) bool {
	if s.adm == nil {
		return true
	}
	_, capped := s.adm.Share(st)
	return capped
}

// candidates are the GPUs that take a shared job now, most free budget first. A staged start
// may go where a borrower waits or is held for, or a staged job waits for its grant (frozen,
// stalled): it takes only what is free beside them (ledger.WithStage), and Unstage stops one
// that keeps a borrower waiting.
func (s *Sched) candidates(states map[string]ledger.GPUState, staging bool) []string {
	var out []string
	for _, g := range s.gpus {
		st := states[g]
		if s.drainFor[g] != nil || s.wholeOn[g] || s.running[g] >= s.perGPU || !st.Healthy {
			continue
		}
		if !staging && (s.frozen[g] || s.stalled[g]) {
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

// undrain ends a drain held for j, which no longer needs a whole GPU: its template's footprint
// came down after it asked for one (the runner's heldBeforeRise), and a GPU drained for a job
// admits nobody else, so the job itself would wait there for ever.
func (s *Sched) undrain(j *Job) {
	for g, d := range s.drainFor {
		if d == j {
			delete(s.drainFor, g)
		}
	}
}

// drainTarget is the GPU a job that needs a whole GPU waits for: the one already drained for it,
// else an idle GPU, else the busy GPU with the fewest jobs (drained from now on), of those whose
// whole budget is at least least. An unhealthy GPU (the enforcer marked it after a GPU-wide event)
// is not picked anew; one drained already stays the target, and the ledger refuses the
// reservation there until it is healthy again.
func (s *Sched) drainTarget(j *Job, states map[string]ledger.GPUState, least size.Bytes) string {
	for _, g := range s.gpus {
		if s.drainFor[g] == j {
			return g
		}
	}
	best := ""
	for _, g := range s.gpus {
		if s.drainFor[g] != nil || s.wholeOn[g] || !states[g].Healthy || s.frozen[g] || WholeBytes(states[g]) < least {
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
func (s *Sched) admit(g string, c size.Bytes, j *Job, states map[string]ledger.GPUState, borrow bool) (ledger.Reservation, bool) {
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

func (s *Sched) start(l *Launch) {
	l.Job.Running = true
	s.smStart(l)
	s.running[l.GPU]++
	s.total++
	if l.Whole {
		s.wholeOn[l.GPU] = true
	}
}

// Finished returns a launch's slot; the caller releases the reservation.
func (s *Sched) Finished(l *Launch) {
	l.Job.Running = false
	s.forgetStage(l.Job)
	s.running[l.GPU]--
	s.smEnd(l)
	s.total--
	if l.Whole {
		s.wholeOn[l.GPU] = false
	}
}

func (s *Sched) probeWindow(t string) time.Duration {
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
func (s *Sched) probeBeside(j *Job, states map[string]ledger.GPUState) (Launch, bool) {
	g := s.drainTarget(j, states, 0)
	if g == "" || s.running[g] >= s.perGPU || !s.smFits(g, j.Template) {
		return Launch{}, false
	}
	protective := s.protectiveCap(j.Template, states[g])
	if protective == 0 {
		return Launch{}, false
	}
	res, ok := s.admit(g, protective, j, states, false)
	if !ok {
		return Launch{}, false
	}
	delete(s.drainFor, g)
	return Launch{Job: j, GPU: g, Res: res, Capped: true, Probe: true, InPlace: true, Window: s.probeWindow(j.Template)}, true
}

// probeBorrowing starts a probe like any job with a known cap, on a small guarantee
// (probeGuarantee, or first the known caps' median: probePrior) and a limit of the GPU's budget:
// it measures its footprint on memory nobody was promised, so it holds back no job whose
// footprint is known.
func (s *Sched) probeBorrowing(j *Job, states map[string]ledger.GPUState) (Launch, bool) {
	launch := func(g string, res ledger.Reservation) (Launch, bool) {
		return Launch{Job: j, GPU: g, Res: res, Capped: true, Probe: true, InPlace: true, Borrowing: true,
			Window: s.probeWindow(j.Template)}, true
	}
	for _, g := range s.candidates(states, false) {
		if !s.smFits(g, j.Template) || s.stageProbe(g, states[g]) {
			continue
		}
		small := s.probeGuarantee(states[g])
		if pr := s.probePrior(states[g]); pr > small {
			// A prior the fence has no room for is no refusal of the probe: the small guarantee
			// that follows says whether the fence left this GPU's guarantees out.
			refused := s.refused[g]
			if res, ok := s.admit(g, pr, j, states, true); ok {
				return launch(g, res)
			}
			s.refused[g] = refused
		}
		if res, ok := s.admit(g, small, j, states, true); ok {
			return launch(g, res)
		}
	}
	return Launch{}, false
}

// protectiveCap is what an in-place probe of template t reserves on a GPU in state st: the
// template's probe_cap, else the run's, in whole units, else half the budget; never more than
// the budget, so a probe_cap too large for this GPU makes the probe hold it whole rather than
// never start.
func (s *Sched) protectiveCap(t string, st ledger.GPUState) size.Bytes {
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
func (s *Sched) sharedPending(j *Job, maxBudget size.Bytes) bool {
	for _, o := range s.jobs {
		if o == j || o.Done || o.Running || o.Whole {
			continue
		}
		if kind, _ := s.need(o, maxBudget); kind != needWhole {
			return true
		}
	}
	return false
}

// Learned records a template's footprint, measured by a probe: its jobs are admitted under the
// cap it earns from now on, and nobody probes it any more.
func (s *Sched) Learned(t string, peak size.Bytes) { s.peaks[t] = peak }

// Raised records that a template needs at least peak (a broken cap, a re-run alone): the
// footprint only ever goes up this way.
func (s *Sched) Raised(t string, peak size.Bytes) { s.peaks[t] = max(s.peaks[t], peak) }

// ProbeEnded frees template t for a new probe if j was probing it.
func (s *Sched) ProbeEnded(t string, j *Job) {
	if s.prober[t] == j {
		delete(s.prober, t)
	}
}

// Recapped records the footprint an in-place probe showed in its window: the template's other
// jobs are admitted under the cap it earned, while the probe itself runs on under that cap.
func (s *Sched) Recapped(l *Launch, res ledger.Reservation, peak size.Bytes) {
	s.Learned(l.Job.Template, peak)
	s.ProbeEnded(l.Job.Template, l.Job)
	l.Res = res
}
