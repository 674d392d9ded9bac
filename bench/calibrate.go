package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// Calibration targets of the busy profile (issue 25): each job alone keeps the SMs active
// 55-65% of its run, in at most about 40 s.
const (
	CalibrationTarget  = 0.60
	CalibrationMinSM   = 0.55
	CalibrationMaxSM   = 0.65
	CalibrationMaxWall = 40 * time.Second
)

// CalibrationQueue is every template once, in the templates' order: what calibration runs
// exclusively, so that each job's GPM figures are its own.
func CalibrationQueue() []Entry {
	out := make([]Entry, len(Templates))
	for i, t := range Templates {
		out[i] = Entry{Name: fmt.Sprintf("c%02d-%s", i+1, t), Template: t}
	}
	return out
}

// CalibrationQueueOf is CalibrationQueue restricted to a comma-separated list of templates
// ("" for all); an unknown name is an error that names it.
func CalibrationQueueOf(list string) ([]Entry, error) {
	all := CalibrationQueue()
	if strings.TrimSpace(list) == "" {
		return all, nil
	}
	var out []Entry
	for _, raw := range strings.Split(list, ",") {
		t := strings.TrimSpace(raw)
		i := slices.IndexFunc(all, func(e Entry) bool { return e.Template == t })
		if i < 0 {
			return nil, fmt.Errorf("template %q: not one of %s", t, strings.Join(Templates, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Suggestion is what calibration proposes for one job's work knob.
type Suggestion struct {
	Knob  string
	From  int
	To    int
	Wall  time.Duration // predicted wall time alone at To
	SM    float64       // predicted SM-active fraction alone at To
	Note  string        // why there is no proposal, or what else to change
	Ready bool          // the measured figures already meet the targets
}

// Suggest proposes the value of a job's work knob that brings its SM-active fraction alone to
// target. The model: a job's wall time is its start-up (everything but the work phase) plus the
// work phase, which scales linearly with the knob, and all its SM activity happens in the work
// phase. With start-up s, work phase w and SM-active seconds a measured at knob value v, scaling
// the knob by k gives a fraction k*a / (s + k*w); solving for target gives k = target*s / (a -
// target*w). When the work phase's own SM activity a/w is not above target, no number of steps
// reaches it: the batch must grow instead.
func Suggest(wall, work time.Duration, smActive float64, knob string, value int, target float64, maxWall time.Duration) Suggestion {
	sg := Suggestion{Knob: knob, From: value}
	f := smActive / wall.Seconds()
	sg.Ready = f >= CalibrationMinSM && f <= CalibrationMaxSM && wall <= maxWall
	switch {
	case knob == "" || value <= 0:
		sg.Note = "no work knob to scale: its work is bounded by time"
		return sg
	case wall <= 0 || work <= 0 || work > wall || smActive <= 0:
		sg.Note = fmt.Sprintf("cannot model it: wall %s, work phase %s, SM-active %.1f s", wall, work, smActive)
		return sg
	}
	s, w := (wall - work).Seconds(), work.Seconds()
	if smActive <= target*w {
		sg.Note = fmt.Sprintf("its work phase keeps the SMs only %.0f%% active, not above the %.0f%% target: raise its batch, not its steps",
			100*smActive/w, 100*target)
		return sg
	}
	k := target * s / (smActive - target*w)
	sg.To = max(1, int(math.Round(float64(value)*k)))
	k = float64(sg.To) / float64(value) // the model at the rounded value
	sg.Wall = time.Duration((s + k*w) * float64(time.Second))
	sg.SM = k * smActive / (s + k*w)
	if sg.Wall > maxWall {
		sg.Note = fmt.Sprintf("at %s=%d it would take %.0f s alone, past %s: shorten its start-up or raise its batch", knob, sg.To, sg.Wall.Seconds(), maxWall)
	}
	return sg
}

// resultWork is the work phase's seconds a job recorded in its result's meta ("timings_s").
func resultWork(path string) (time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var doc struct {
		Meta struct {
			Timings map[string]float64 `json:"timings_s"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return 0, fmt.Errorf("result %s: %w", path, err)
	}
	w, ok := doc.Meta.Timings["work"]
	if !ok || w <= 0 {
		return 0, fmt.Errorf("result %s records no work phase", path)
	}
	return time.Duration(w * float64(time.Second)), nil
}

// knobValue is the value of a template's work knob in profile p (0 when it has none, or when the
// profile leaves it at the script's default, which calibration does not know).
func knobValue(p WorkloadProfile, template string, override map[string]string) (string, int) {
	knob := WorkKnob[template]
	env := ProfileEnv(p, template)
	v, ok := override[knob]
	if !ok {
		v = env[knob]
	}
	n, _ := strconv.Atoi(v)
	return knob, n
}

// RenderCalibration is the table a calibration run prints: each job alone, its wall time, its SM
// figures, its peak memory, and the work knob value that would bring it to the target.
// run is the exclusive arm's run, resultsDir its result files; override is the --job-env given.
func RenderCalibration(sum Summary, run ArmRun, resultsDir string, override map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Calibration of the %s profile (%s backend, %s): each job alone; target %.0f%% SM active (%.0f-%.0f%%) in at most %s\n\n",
		sum.Workload.orStartup(), orDash(sum.Backend), orDash(sum.GPU), 100*CalibrationTarget, 100*CalibrationMinSM, 100*CalibrationMaxSM, CalibrationMaxWall)
	b.WriteString("| job | template | exit | wall | work phase | SM active (GPM) | SM occupancy | peak memory | in target | proposal |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	if len(sum.Scores) == 0 {
		return b.String()
	}
	ex := sum.Scores[0]
	peak := peaks(run)
	for _, j := range ex.PerJob {
		sm, occ, work, ok, prop := "-", "-", "-", "-", "-"
		wd, werr := resultWork(filepath.Join(resultsDir, j.Job+".json"))
		if werr == nil {
			work = fmtDur(wd)
		}
		if j.SM != nil {
			sm, occ = fmtPct(j.SM.Fraction), fmtPct(j.SM.Occupancy)
			knob, val := knobValue(sum.Workload, j.Template, override)
			sg := Suggest(j.Wall, wd, j.SM.ActiveSeconds, knob, val, CalibrationTarget, CalibrationMaxWall)
			ok = strconv.FormatBool(sg.Ready)
			switch {
			case werr != nil && knob != "":
				prop = "no work phase recorded: " + werr.Error()
			case sg.To > 0:
				prop = fmt.Sprintf("%s=%d (now %d): %.1f s, %s active", sg.Knob, sg.To, sg.From, sg.Wall.Seconds(), fmtPct(sg.SM))
				if sg.Note != "" {
					prop += "; " + sg.Note
				}
			default:
				prop = sg.Note
			}
		}
		pk := "-"
		if peak[j.Job] > 0 {
			pk = peak[j.Job].String()
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", j.Job, j.Template, j.FinalExit, fmtDur(j.Wall),
			work, sm, occ, pk, ok, prop)
	}
	return b.String()
}

// peaks is each job's highest peak memory over its attempts in run.
func peaks(run ArmRun) map[string]size.Bytes {
	out := map[string]size.Bytes{}
	for _, a := range run.Attempts {
		out[a.Job] = max(out[a.Job], a.PeakBytes)
	}
	return out
}

// CalibrationProfiles is the footprints file of a calibration's exclusive run (every job's peak,
// as NVML saw its processes), for warm arms of the same profile: LoadProfilesFor reads it. The
// leaker is left out, so the runner probes it as it would an unknown job. Each template with a
// peak also gets its SM-active share alone (_sm_active_percent: the mean over its jobs of the
// exclusive run's GPM figure, perJob), the compute budget's demand; a template whose GPU had no
// GPM figure gets none, so it stays unknown.
func CalibrationProfiles(run ArmRun, perJob []JobScore, p WorkloadProfile, source string) ([]byte, error) {
	doc := map[string]any{
		"_source":           source,
		"_measured_at":      time.Now().UTC().Format(time.RFC3339),
		profilesWorkloadKey: string(p.orStartup()),
	}
	best := map[string]size.Bytes{}
	for _, a := range run.Attempts {
		if a.Template == Leaker || a.Outcome != record.OutcomeOK || a.PeakBytes == 0 || best[a.Template] >= a.PeakBytes {
			continue
		}
		best[a.Template] = a.PeakBytes
		doc[a.Template] = strconv.FormatUint(uint64(a.PeakBytes), 10)
	}
	sum, n := map[string]float64{}, map[string]int{}
	for _, j := range perJob {
		if j.SM == nil || best[j.Template] == 0 {
			continue
		}
		sum[j.Template] += 100 * j.SM.Fraction
		n[j.Template]++
	}
	if len(sum) > 0 {
		sm := map[string]float64{}
		for t, v := range sum {
			// One decimal, as the docs' tables give it: GPM's figures are not finer than that.
			sm[t] = math.Round(10*v/float64(n[t])) / 10
		}
		doc[profilesSMKey] = sm
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
