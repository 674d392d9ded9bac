package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runner"
	"github.com/hashicorp/go-hclog"
)

// ArmSpec is one arm to run: the runner's arm, enforcement mode and footprint profiles.
type ArmSpec struct {
	Label    string // unique in an invocation; the folder its results go to
	Arm      record.Arm
	Mode     string          // mps, isolated ("" for exclusive)
	Profiles record.Profiles // "" for exclusive
	// Borrow is the packed arm's borrowing (node.BorrowWait, BorrowLend, ...) when the entry
	// names one; "" = the invocation's --borrow. It lets one call compare borrowing rules beside
	// the same exclusive run.
	Borrow string
	// Hold is the packed arm's borrower hold when the entry names one ("instant": none;
	// "holdN": served after policy.DefaultHold's quiet time, at most N; "holdN-afterP": the
	// hold begins once the borrower has waited P); nil = the runner's default.
	Hold *policy.HoldRule
	// SMBudget is the packed arm's compute budget when the entry names one ("sm150": the
	// policy's sm_budget_percent 150); 0 = the policy's (off by default).
	SMBudget float64
	// Stage is how many jobs the packed arm may stage on a GPU: gpufrac run's default
	// (runner.DefaultStage) unless the entry names it ("stage4": gpufrac run --stage 4;
	// "stage0": none, the packed arm before 2026-12-05); StageNamed says the entry named it.
	Stage      int
	StageNamed bool
	// ProbeKnown is the packed arm's --probe-guarantee known, when the entry ends in
	// "probeknown" (runner.Options.ProbeKnown).
	ProbeKnown bool
}

// probeKnownWord ends a packed arm's entry whose probes are offered the known caps' median
// (ArmSpec.ProbeKnown).
const probeKnownWord = "probeknown"

var (
	modeNames   = []string{"mps", "isolated"}
	borrowNames = []string{node.BorrowOff, node.BorrowNow, node.BorrowWait, node.BorrowLend}
)

// ParseArms reads a comma-separated arm list. Each entry is ARM[-MODE][-PROFILES][-BORROW][-HOLD[-AFTER]][-SMN][-STAGEN][-probeknown]:
// "exclusive", "packed-mps", "packed-isolated-warm", "static", "uncapped-retry",
// "packed-isolated-warm-lend", "packed-isolated-warm-wait-hold30s". MODE defaults to defMode,
// PROFILES to cold (they mean nothing for exclusive), BORROW and HOLD (packed only) to the
// invocation's. An entry that
// repeats gets "-2", "-3" appended to its label: "exclusive,packed-mps,exclusive" runs
// exclusive twice, labelled exclusive and exclusive-2.
func ParseArms(list, defMode string) ([]ArmSpec, error) { return parseArms(list, defMode, true) }

// ParseArmsWithRef is ParseArms for an invocation whose reference results come from an earlier
// exclusive run (Config.RefDir): its first arm need not be exclusive.
func ParseArmsWithRef(list, defMode string) ([]ArmSpec, error) {
	return parseArms(list, defMode, false)
}

func parseArms(list, defMode string, exclusiveFirst bool) ([]ArmSpec, error) {
	if !slices.Contains(modeNames, defMode) {
		return nil, fmt.Errorf("mode %q: must be one of %q", defMode, modeNames)
	}
	var out []ArmSpec
	seen := map[string]int{}
	for _, raw := range strings.Split(list, ",") {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		// "uncapped-retry" holds a dash, so an entry's arm is the longest arm it starts with.
		arm := ""
		for _, a := range record.Arms {
			if (e == string(a) || strings.HasPrefix(e, string(a)+"-")) && len(a) > len(arm) {
				arm = string(a)
			}
		}
		if arm == "" {
			return nil, fmt.Errorf("arm %q: %q is not one of %q", e, strings.Split(e, "-")[0], record.Arms)
		}
		spec := ArmSpec{Arm: record.Arm(arm), Mode: defMode, Profiles: record.ProfilesCold}
		if spec.Arm == record.ArmPacked {
			spec.Stage = runner.DefaultStage
		}
		var rest []string
		if e != arm {
			rest = strings.Split(strings.TrimPrefix(e, arm+"-"), "-")
		}
		if len(rest) > 0 && slices.Contains(modeNames, rest[0]) {
			spec.Mode, rest = rest[0], rest[1:]
		}
		if len(rest) > 0 && slices.Contains(record.ProfileChoices, record.Profiles(rest[0])) {
			spec.Profiles, rest = record.Profiles(rest[0]), rest[1:]
		}
		if len(rest) > 0 && spec.Arm == record.ArmPacked && slices.Contains(borrowNames, rest[0]) {
			spec.Borrow, rest = rest[0], rest[1:]
		}
		if len(rest) > 0 && spec.Arm == record.ArmPacked {
			h, ok, err := parseHold(rest[0])
			if err != nil {
				return nil, fmt.Errorf("arm %q: %w", e, err)
			}
			if ok {
				rest = rest[1:]
				if len(rest) > 0 && h.Quiet > 0 && strings.HasPrefix(rest[0], "after") {
					if h.After, err = time.ParseDuration(strings.TrimPrefix(rest[0], "after")); err != nil {
						return nil, fmt.Errorf("arm %q: %q: want after and a duration, as in after10s: %w", e, rest[0], err)
					}
					rest = rest[1:]
				}
				if err := h.Validate(); err != nil {
					return nil, fmt.Errorf("arm %q: %w", e, err)
				}
				spec.Hold = &h
			}
		}
		if len(rest) > 0 && spec.Arm == record.ArmPacked {
			b, ok, err := parseSMBudget(rest[0])
			if err != nil {
				return nil, fmt.Errorf("arm %q: %w", e, err)
			}
			if ok {
				spec.SMBudget, rest = b, rest[1:]
			}
		}
		if len(rest) > 0 && spec.Arm == record.ArmPacked && strings.HasPrefix(rest[0], "stage") {
			n, err := strconv.Atoi(strings.TrimPrefix(rest[0], "stage"))
			if err != nil || n < 0 || n > 16 {
				return nil, fmt.Errorf("arm %q: %q: want stage and a count of jobs a GPU from 0 (none) to 16, as in stage4", e, rest[0])
			}
			spec.Stage, spec.StageNamed, rest = n, true, rest[1:]
		}
		if len(rest) > 0 && spec.Arm == record.ArmPacked && rest[0] == probeKnownWord {
			spec.ProbeKnown, rest = true, rest[1:]
		}
		if len(rest) > 0 {
			return nil, fmt.Errorf("arm %q: %q is neither a mode %q, profiles %q, a packed arm's borrowing %q, its hold (instant, holdN), its compute budget (smN), its staging (stageN) nor %s",
				e, strings.Join(rest, "-"), modeNames, record.ProfileChoices, borrowNames, probeKnownWord)
		}
		if spec.Arm == record.ArmExclusive {
			spec.Mode, spec.Profiles = "", ""
		}
		seen[e]++
		spec.Label = e
		if seen[e] > 1 {
			spec.Label = fmt.Sprintf("%s-%d", e, seen[e])
		}
		out = append(out, spec)
	}
	if len(out) == 0 {
		return nil, errors.New("no arms given")
	}
	if exclusiveFirst && out[0].Arm != record.ArmExclusive {
		return nil, fmt.Errorf("arm list %q: the first arm must be exclusive: its results are the references every other arm is checked against", list)
	}
	return out, nil
}

// parseHold reads an arm entry's hold: "instant" (admissions pause only while an allocation
// waits) or "hold" and a bound ("hold30s"); ok is false for a word that is neither.
func parseHold(w string) (policy.HoldRule, bool, error) {
	if w == "instant" {
		return policy.NoHold, true, nil
	}
	b, found := strings.CutPrefix(w, "hold")
	if !found {
		return policy.HoldRule{}, false, nil
	}
	d, err := time.ParseDuration(b)
	if err != nil {
		return policy.HoldRule{}, false, fmt.Errorf("hold %q: want hold and a bound, as in hold30s: %w", w, err)
	}
	return policy.HoldRule{Quiet: policy.DefaultHold.Quiet, Bound: d}, true, nil
}

// parseSMBudget reads an arm entry's compute budget: "sm" and a percent ("sm150"), checked as
// the policy checks sm_budget_percent; ok is false for a word that does not start with "sm".
func parseSMBudget(w string) (float64, bool, error) {
	b, found := strings.CutPrefix(w, "sm")
	if !found {
		return 0, false, nil
	}
	v, err := strconv.ParseFloat(b, 64)
	if err == nil {
		p := policy.Default()
		p.SMBudgetPercent = v
		err = p.Validate()
	}
	if err != nil || v == 0 {
		return 0, false, fmt.Errorf("compute budget %q: want sm and a percent from 1 to %d, as in sm150: %v", w, policy.MaxSMBudgetPercent, err)
	}
	return v, true, nil
}

// JobSpec is one job ready for the runner.
type JobSpec struct {
	Entry
	Command []string
	Env     map[string]string
	Result  string
}

// ArmRunner runs one arm of a queue and returns every attempt it made. It is the seam to the
// runner package (RunnerArms) and lets the bench be tested from records alone. A returned error
// with a non-nil partial ArmRun keeps what finished.
type ArmRunner interface {
	RunArm(ctx context.Context, spec ArmSpec, jobs []JobSpec, stateDir, outDir string) (ArmRun, error)
}

// Config is one benchmark invocation: one seed, its arms in order.
type Config struct {
	Seed      uint64
	Arms      []ArmSpec
	Workloads Workloads
	Runner    ArmRunner
	// OutDir receives <label>/results, <label>/state, the raw records and the summary.
	OutDir string
	// ArmTimeout bounds each arm; Deadline, when set, skips arms that would start after it.
	ArmTimeout time.Duration
	Deadline   time.Time
	// Workload is the jobs' size profile ("" is ProfileStartup); Workloads must size them so.
	Workload WorkloadProfile
	// RefDir, when set, holds the reference results (an earlier invocation's exclusive arm of
	// the same seed and profile, see CheckRef): a busy seed's exclusive arm fills a device call
	// of its own, so its packed arms run in the next call against it.
	RefDir string
	// Queue, when set, replaces the seed's queue (calibration runs each template once);
	// QueueLen, when set, keeps only the seed's first QueueLen jobs (a short A/A run).
	Queue    []Entry
	QueueLen int
	// Profiles are measured footprints a warm arm starts from when no cold arm of its mode ran
	// before it in this invocation (profiles measured by an earlier probe of each template).
	Profiles []ledger.Profile
	// BeforeArm, when set, runs before each arm starts; an error skips the arm (noted).
	BeforeArm func(ArmSpec) error
	// Summary fields recorded as given.
	Command, Machine, GPU, Driver, Backend string
	Logger                                 hclog.Logger
}

// Run runs every arm, checks results against the first exclusive arm, scores, and writes the
// raw records after each arm, so a run cut short keeps what it finished.
func Run(ctx context.Context, c Config) (Summary, []ArmRun, error) {
	log := c.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if c.Runner == nil || c.Workloads == nil {
		return Summary{}, nil, errors.New("bench: Runner and Workloads must be set")
	}
	if len(c.Arms) == 0 || (c.RefDir == "" && c.Arms[0].Arm != record.ArmExclusive) {
		return Summary{}, nil, errors.New("bench: the first arm must be exclusive (it gives the reference results), or RefDir name an earlier exclusive run's")
	}
	queue := Draw(c.Seed)
	switch {
	case len(c.Queue) > 0:
		queue = c.Queue
	case c.QueueLen < 0 || c.QueueLen > len(queue):
		return Summary{}, nil, fmt.Errorf("bench: queue length %d: want 1 to %d (0: the whole queue)", c.QueueLen, len(queue))
	case c.QueueLen > 0:
		queue = queue[:c.QueueLen]
	}
	sum := Summary{Seed: c.Seed, Started: time.Now().UTC(), Command: c.Command, Machine: c.Machine,
		GPU: c.GPU, Driver: c.Driver, Backend: c.Backend, Queue: queue, Workload: c.Workload.orStartup()}
	digest, note := workloadsDigest(c.Workloads)
	sum.WorkloadsDigest = digest
	if note != "" {
		sum.Notes = append(sum.Notes, note)
	}
	var runs []ArmRun
	refDir := filepath.Join(c.OutDir, c.Arms[0].Label, "results")
	if c.RefDir != "" {
		refDir = c.RefDir
		_, ref, err := loadRef(c.RefDir)
		if err != nil {
			return sum, nil, err
		}
		note, err := checkRefDigest(c.RefDir, ref.WorkloadsDigest, digest)
		if err != nil {
			return sum, nil, err
		}
		if note != "" {
			sum.Notes = append(sum.Notes, note)
		}
		sum.Ref = &ref
		sum.Notes = append(sum.Notes, fmt.Sprintf("results checked against, and ratios taken over, the exclusive run in %s (%s, %d of %d jobs)",
			c.RefDir, fmtDur(ref.Makespan), ref.Completed, ref.Jobs))
	}
	lastCold := map[string]string{} // mode -> state dir of the last cold packed arm
	for _, spec := range c.Arms {
		if err := ctx.Err(); err != nil {
			sum.Notes = append(sum.Notes, fmt.Sprintf("%s skipped: %v", spec.Label, err))
			sum.Skipped = append(sum.Skipped, spec.Label)
			continue
		}
		if !c.Deadline.IsZero() && time.Now().After(c.Deadline) {
			sum.Notes = append(sum.Notes, fmt.Sprintf("%s skipped: the deadline %s had passed", spec.Label, c.Deadline.UTC().Format(time.RFC3339)))
			log.Warn("deadline passed: skipping arm", "arm", spec.Label)
			sum.Skipped = append(sum.Skipped, spec.Label)
			continue
		}
		if c.BeforeArm != nil {
			if err := c.BeforeArm(spec); err != nil {
				sum.Notes = append(sum.Notes, fmt.Sprintf("%s skipped: %v", spec.Label, err))
				sum.Skipped = append(sum.Skipped, spec.Label)
				continue
			}
		}
		armDir := filepath.Join(c.OutDir, spec.Label)
		resDir := filepath.Join(armDir, "results")
		stateDir := filepath.Join(armDir, "state")
		if err := os.MkdirAll(resDir, 0o755); err != nil {
			return sum, runs, fmt.Errorf("arm %s: %w", spec.Label, err)
		}
		if spec.Profiles == record.ProfilesWarm {
			if from, ok := lastCold[spec.Mode]; ok {
				if err := copyDir(from, stateDir); err != nil {
					sum.Notes = append(sum.Notes, fmt.Sprintf("%s: could not reuse the profiles of %s: %v", spec.Label, from, err))
				} else {
					// Where --profiles was given the command line names a stored file this arm
					// never read: the summary must say so.
					unread := ""
					if len(c.Profiles) > 0 {
						unread = ", not from --profiles"
					}
					sum.Notes = append(sum.Notes, fmt.Sprintf("%s: starts from the footprints the cold %s arm before it learned (%s)%s", spec.Label, spec.Mode, filepath.Base(filepath.Dir(from)), unread))
				}
			} else if len(c.Profiles) > 0 {
				if err := seedProfiles(stateDir, c.Profiles); err != nil {
					return sum, runs, fmt.Errorf("arm %s: %w", spec.Label, err)
				}
				sum.Notes = append(sum.Notes, fmt.Sprintf("%s: starts from %d stored profiles (--profiles)", spec.Label, len(c.Profiles)))
			} else {
				sum.Notes = append(sum.Notes, fmt.Sprintf("%s: no cold %s arm ran before it, so it starts with no stored profiles", spec.Label, spec.Mode))
			}
		}
		if err := os.MkdirAll(stateDir, 0o755); err != nil {
			return sum, runs, fmt.Errorf("arm %s: %w", spec.Label, err)
		}
		jobs, err := buildJobs(queue, c.Workloads, resDir)
		if err != nil {
			return sum, runs, fmt.Errorf("arm %s: %w", spec.Label, err)
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if c.ArmTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, c.ArmTimeout)
		}
		log.Info("arm starting", "arm", spec.Label, "jobs", len(jobs))
		run, err := c.Runner.RunArm(actx, spec, jobs, stateDir, armDir)
		cancel()
		run.Label, run.Arm, run.Mode, run.Profiles, run.Seed, run.Jobs = spec.Label, spec.Arm, spec.Mode, spec.Profiles, c.Seed, queue
		run.Workload = c.Workload.orStartup()
		if err != nil {
			run.Error = err.Error()
			log.Error("arm failed", "arm", spec.Label, "error", err)
		}
		if spec.Arm == record.ArmPacked && spec.Profiles == record.ProfilesCold {
			lastCold[spec.Mode] = stateDir
		}
		for i, n := range run.GPMNotes {
			if i == 3 {
				sum.Notes = append(sum.Notes, fmt.Sprintf("%s: %d more GPM notes in runs.json", spec.Label, len(run.GPMNotes)-i))
				break
			}
			sum.Notes = append(sum.Notes, spec.Label+": "+n)
		}
		runs = append(runs, run)
		sum.Scores = scoreAll(runs, refDir, c.OutDir, sum.Ref)
		if err := WriteRaw(c.OutDir, sum, runs); err != nil {
			log.Error("writing raw results", "error", err)
		}
		log.Info("arm done", "arm", spec.Label, "completed", sum.Scores[len(sum.Scores)-1].Completed,
			"ratio", sum.Scores[len(sum.Scores)-1].Ratio)
	}
	sum.Notes = append(sum.Notes, exclusiveAgreement(sum.Scores)...)
	return sum, runs, WriteRaw(c.OutDir, sum, runs)
}

// seedProfiles writes profiles into the ledger an arm's runner will open in stateDir.
func seedProfiles(stateDir string, profiles []ledger.Profile) error {
	led, err := ledger.Open(stateDir, ledger.Options{})
	if err != nil {
		return fmt.Errorf("seeding profiles: %w", err)
	}
	for _, p := range profiles {
		if err := led.RecordProfile(p); err != nil {
			_ = led.Close()
			return fmt.Errorf("seeding profile of %s: %w", p.Template, err)
		}
	}
	return led.Close()
}

func buildJobs(queue []Entry, w Workloads, resDir string) ([]JobSpec, error) {
	jobs := make([]JobSpec, 0, len(queue))
	for _, e := range queue {
		res := filepath.Join(resDir, e.Name+".json")
		cmd, env, err := w.Command(e.Template, res)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, JobSpec{Entry: e, Command: cmd, Env: env, Result: res})
	}
	return jobs, nil
}

// scoreAll scores every run so far against the reference results and sets the ratios.
func scoreAll(runs []ArmRun, refDir, outDir string, ref *Score) []Score {
	scores := make([]Score, 0, len(runs))
	for _, r := range runs {
		dir := filepath.Join(outDir, r.Label, "results")
		scores = append(scores, ScoreRun(r, func(j Entry) error {
			return CompareFiles(filepath.Join(refDir, j.Name+".json"), filepath.Join(dir, j.Name+".json"))
		}))
	}
	var refs []Score
	if ref != nil {
		refs = append(refs, *ref)
	}
	return withBaselines(scores, refs)
}

// exclusiveAgreement says whether the later exclusive runs agree with the first within the
// fixed tolerances: if they don't, the tolerance (or the workload) is wrong, not the packing.
func exclusiveAgreement(scores []Score) []string {
	var notes []string
	var firstJPH float64
	for _, s := range scores {
		if s.Arm != record.ArmExclusive {
			continue
		}
		if firstJPH == 0 {
			firstJPH = s.JobsPerGPUHour
			continue
		}
		agree := 0
		for _, j := range s.PerJob {
			if j.Completed {
				agree++
			}
		}
		noise := "-"
		if firstJPH > 0 {
			noise = fmt.Sprintf("%.3f", s.JobsPerGPUHour/firstJPH)
		}
		notes = append(notes, fmt.Sprintf("%s vs %s: %d of %d jobs completed within tolerance; jobs/GPU-h ratio %s (run-to-run noise)",
			s.Label, scores[0].Label, agree, s.Jobs, noise))
	}
	return notes
}

// copyDir copies a directory tree of regular files (a runner state directory).
func copyDir(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// CheckRef finds the result files of an earlier exclusive run for a run of seed in profile p:
// dir is its arm directory (holding results/) or the results directory itself, inside the
// invocation's directory (holding summary.json). It refuses another seed's or profile's run,
// whose results would differ from every job's.
func CheckRef(dir string, seed uint64, p WorkloadProfile) (string, error) {
	res, ref, err := loadRef(dir)
	switch {
	case err != nil:
		return "", err
	case ref.Seed != seed || ref.Workload.orStartup() != p.orStartup():
		return "", fmt.Errorf("reference %s is seed %d, %s profile; this run is seed %d, %s profile", dir, ref.Seed, ref.Workload.orStartup(), seed, p.orStartup())
	}
	return res, nil
}

// loadRef reads a reference exclusive run: its results directory and its score, with the seed
// and profile of its invocation.
func loadRef(dir string) (string, Score, error) {
	armDir := dir
	if filepath.Base(dir) == "results" {
		armDir = filepath.Dir(dir)
	}
	res := filepath.Join(armDir, "results")
	if st, err := os.Stat(res); err != nil || !st.IsDir() {
		return "", Score{}, fmt.Errorf("reference %s: no results directory: %v", dir, err)
	}
	sum, err := LoadSummary(filepath.Join(filepath.Dir(armDir), "summary.json"))
	if err != nil {
		return "", Score{}, fmt.Errorf("reference %s: %w", dir, err)
	}
	label := filepath.Base(armDir)
	i := slices.IndexFunc(sum.Scores, func(s Score) bool { return s.Label == label })
	if i < 0 || sum.Scores[i].Arm != record.ArmExclusive {
		return "", Score{}, fmt.Errorf("reference %s: %q is not an exclusive arm of that run", dir, label)
	}
	ref := sum.Scores[i]
	ref.Seed, ref.Workload, ref.WorkloadsDigest = sum.Seed, sum.Workload.orStartup(), sum.WorkloadsDigest
	return res, ref, nil
}
