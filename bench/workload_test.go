package bench

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// h200 is the simulated benchmark GPU's memory (gpufrac-bench's default --sim-gpus).
const h200 = 140 * size.GiB

// The busy profile's simulated jobs keep the SMs active as the H200 measured them alone: 55-65%
// of their run for the compute-heavy ones (the target), in at most about 40 s so that a
// seed's exclusive arm fits a device call; the start-up profile's stay start-up heavy, as
// measured on the H200 (4.4% for a LoRA job).
func TestProfileSizes(t *testing.T) {
	type want struct {
		minSM, maxSM   float64
		minWall, maxWa time.Duration
	}
	tests := []struct {
		profile WorkloadProfile
		want    want
		// except are templates the H200 measured outside the target (busy seed 1's exclusive
		// arm): generation decodes, the leaker computes only in its small phase, lora-0.6b's
		// 12 s of start-up cannot be amortised in 40 s, embed-0.6b ran a little over.
		except map[string]want
	}{
		{ProfileBusy, want{0.55, 0.65, 20 * time.Second, 42 * time.Second}, map[string]want{
			Gen17B:   {0.05, 0.10, 15 * time.Second, 20 * time.Second},
			Leaker:   {0.25, 0.40, 20 * time.Second, 35 * time.Second},
			LoRA06B:  {0.48, 0.55, 30 * time.Second, 36 * time.Second},
			Embed06B: {0.65, 0.70, 35 * time.Second, 42 * time.Second},
		}},
		{ProfileStartup, want{0, 0.10, 8 * time.Second, 31 * time.Second}, nil},
	}
	for _, tc := range tests {
		shapes := shapesOf(tc.profile)
		for _, tpl := range Templates {
			sh, ok := shapes[tpl]
			if !ok {
				t.Errorf("%s profile: no simulated shape for %s", tc.profile, tpl)
				continue
			}
			wall, active, err := sh.alone(h200)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.profile, tpl, err)
			}
			w, ok := tc.except[tpl]
			if !ok {
				w = tc.want
			}
			f := active.Seconds() / wall.Seconds()
			if f < w.minSM || f > w.maxSM || wall < w.minWall || wall > w.maxWa {
				t.Errorf("%s %s alone: %.1f s, SMs active %.1f%%; want %v-%v and %.0f-%.0f%%", tc.profile, tpl,
					wall.Seconds(), 100*f, w.minWall, w.maxWa, 100*w.minSM, 100*w.maxSM)
			}
		}
	}
}

// scriptKnobs is the source of a template's script and of the module it delegates to
// (lora_17b.py runs lora_06b.py's main).
func scriptSource(t *testing.T, template string) string {
	t.Helper()
	var src strings.Builder
	for _, f := range []string{Scripts[template], "common.py"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "workloads", f))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	if template == LoRA17B {
		b, err := os.ReadFile(filepath.Join("..", "examples", "workloads", Scripts[LoRA06B]))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	return src.String()
}

// Every knob the busy profile sets is one its script reads (a misspelt knob would be ignored
// without a word and the job would run at its start-up size), with a positive integer value, and
// every job but the leaker has the knob that calibration scales.
func TestBusySizesAreReadByTheScripts(t *testing.T) {
	for _, tpl := range Templates {
		knobs, ok := BusySizes[tpl]
		if !ok || len(knobs) == 0 {
			t.Errorf("%s: no busy sizes", tpl)
			continue
		}
		src := scriptSource(t, tpl)
		for k, v := range knobs {
			if !strings.Contains(src, `"`+k+`"`) {
				t.Errorf("%s: busy knob %s is not read by %s", tpl, k, Scripts[tpl])
			}
			if n, err := strconv.Atoi(v); err != nil || n < 0 || (n == 0 && k != "GPUFRAC_LEAKER_STEP_MS") {
				t.Errorf("%s: %s=%q is not a positive integer", tpl, k, v)
			}
		}
		if tpl == Leaker {
			continue
		}
		if k, ok := WorkKnob[tpl]; !ok || knobs[k] == "" {
			t.Errorf("%s: the busy sizes do not set its work knob %q", tpl, k)
		}
	}
}

func TestProfileEnv(t *testing.T) {
	if env := ProfileEnv(ProfileStartup, LoRA06B); env != nil {
		t.Errorf("startup profile: env %v, want the scripts' defaults", env)
	}
	env := ProfileEnv(ProfileBusy, LoRA06B)
	if env["GPUFRAC_STEPS"] != BusySizes[LoRA06B]["GPUFRAC_STEPS"] {
		t.Fatalf("busy env %v", env)
	}
	env["GPUFRAC_STEPS"] = "1"
	if BusySizes[LoRA06B]["GPUFRAC_STEPS"] == "1" {
		t.Fatal("ProfileEnv handed out the profile's own map")
	}
	// The job's command carries the profile's sizes; --job-env overrides win over them.
	py := PythonWorkloads{Dir: "/w", Profile: ProfileBusy, Env: map[string]string{"GPUFRAC_BATCH": "2"}}
	_, env, err := py.Command(LoRA17B, "/r.json")
	if err != nil {
		t.Fatal(err)
	}
	if env["GPUFRAC_STEPS"] != BusySizes[LoRA17B]["GPUFRAC_STEPS"] || env["GPUFRAC_BATCH"] != "2" {
		t.Fatalf("busy lora-1.7b env %v", env)
	}
	for _, tc := range []struct {
		in      string
		want    WorkloadProfile
		wantErr bool
	}{{"", ProfileStartup, false}, {"startup", ProfileStartup, false}, {"busy", ProfileBusy, false}, {"heavy", "", true}} {
		got, err := ParseWorkloadProfile(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), `"heavy"`)) {
			t.Errorf("ParseWorkloadProfile(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestDrawDeterministic(t *testing.T) {
	for _, seed := range []uint64{0, 1, 2, 3, 42, 1 << 63} {
		a, b := Draw(seed), Draw(seed)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two draws differ:\n%v\n%v", seed, a, b)
		}
	}
	if reflect.DeepEqual(Draw(1), Draw(2)) || reflect.DeepEqual(Draw(2), Draw(3)) {
		t.Fatal("seeds 1, 2, 3 should give different queues")
	}
}

// The published seeds' queues must never change: results of different days are compared.
func TestDrawSeed1IsPinned(t *testing.T) {
	want := []string{LoRA17B, LoRA06B, LoRA17B, Gen17B, ResNet50, FullFT06B, Eval17B, Leaker,
		FullFT06B, Embed06B, LoRA06B, LoRA06B}
	var got []string
	for _, e := range Draw(1) {
		got = append(got, e.Template)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("seed 1 queue changed:\n got %v\nwant %v", got, want)
	}
}

func TestDrawShape(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		q := Draw(seed)
		if len(q) != QueueLen {
			t.Fatalf("seed %d: %d jobs, want %d", seed, len(q), QueueLen)
		}
		count := map[string]int{}
		names := map[string]bool{}
		for _, e := range q {
			count[e.Template]++
			if names[e.Name] {
				t.Fatalf("seed %d: job name %q twice", seed, e.Name)
			}
			names[e.Name] = true
			if !strings.HasSuffix(e.Name, "-"+e.Template) {
				t.Fatalf("seed %d: name %q does not end in its template %q", seed, e.Name, e.Template)
			}
		}
		if count[Leaker] != 1 {
			t.Fatalf("seed %d: %d leakers, want exactly 1", seed, count[Leaker])
		}
		for _, tpl := range Templates {
			if count[tpl] == 0 {
				t.Fatalf("seed %d: template %s missing from %v", seed, tpl, q)
			}
		}
	}
}

func TestIntnRange(t *testing.T) {
	r := splitmix{state: 7}
	seen := map[int]bool{}
	for i := 0; i < 1000; i++ {
		v := r.intn(7)
		if v < 0 || v >= 7 {
			t.Fatalf("intn(7) = %d", v)
		}
		seen[v] = true
	}
	if len(seen) != 7 {
		t.Fatalf("1000 draws of intn(7) hit only %v", seen)
	}
}

func TestWorkloadCommands(t *testing.T) {
	py := PythonWorkloads{Python: "/usr/bin/python3", Dir: "/w", Cache: "/c", Env: map[string]string{"GPUFRAC_STEPS": "2"}}
	cmd, env, err := py.Command(Eval17B, "/r/x.json")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/bin/python3", filepath.Join("/w", "eval_17b.py"), "/r/x.json"}; !slices.Equal(cmd, want) {
		t.Fatalf("command %v, want %v", cmd, want)
	}
	if env["GPUFRAC_CACHE"] != "/c" || env["GPUFRAC_STEPS"] != "2" || env["PYTHONUNBUFFERED"] != "1" {
		t.Fatalf("env %v", env)
	}
	for _, tpl := range Templates {
		if _, ok := Scripts[tpl]; !ok {
			t.Fatalf("template %s has no script", tpl)
		}
	}
	// The leaker grows to a share of the physical GPU in every arm, not of the guarantee a
	// capped task's CUDA reports as the device's size; the other jobs are not told.
	py.GPUBytes = 141 * size.GiB
	if _, env, _ := py.Command(Leaker, "/r/l.json"); env["GPUFRAC_LEAK_DEVICE_BYTES"] != "151397597184" {
		t.Fatalf("leaker env %v: want GPUFRAC_LEAK_DEVICE_BYTES=151397597184 (141GiB)", env)
	}
	if _, env, _ := py.Command(Eval17B, "/r/x.json"); env["GPUFRAC_LEAK_DEVICE_BYTES"] != "" {
		t.Fatalf("eval env %v: only the leaker is told the GPU's size", env)
	}
	if _, _, err := py.Command("gpt-5", "/r"); err == nil || !strings.Contains(err.Error(), `"gpt-5"`) {
		t.Fatalf("unknown template: error %v should name it", err)
	}
	sim := SimWorkloads{Program: []string{"bench", "simjob"}, Scale: 0.5}
	cmd, _, err = sim.Command(Leaker, "/r/l.json")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bench", "simjob", "--template", "leaker", "--result", "/r/l.json", "--scale", "0.5", "--profile", "startup"}; !slices.Equal(cmd, want) {
		t.Fatalf("sim command %v, want %v", cmd, want)
	}
	if _, _, err := (SimWorkloads{}).Command(Leaker, "/r"); err == nil {
		t.Fatal("sim workloads without a program should fail")
	}
}

func res(tpl, kind, values string) Result {
	return Result{Template: tpl, Kind: kind, Values: []byte(values)}
}

func TestCompare(t *testing.T) {
	losses := "[12.0, 11.5, 11.0, 10.5, 10.0, 9.5, 9.0]"
	// mean of the last 5 is 10.0; 10.0 * 5e-4 = 0.005 spread over one value gives 0.025.
	near := "[12.0, 11.5, 11.0, 10.5, 10.0, 9.5, 9.025]"
	far := "[12.0, 11.5, 11.0, 10.5, 10.0, 9.5, 9.2]"
	cases := []struct {
		name    string
		ref     Result
		got     Result
		wantErr string
	}{
		{"exact identical", res(Eval17B, KindExact, "[-1.5, -2.25]"), res(Eval17B, KindExact, "[-1.5, -2.25]"), ""},
		{"exact identical, other spacing", res(Gen17B, KindExact, "[[1,2],[3,4]]"), res(Gen17B, KindExact, "[ [1, 2], [3, 4] ]"), ""},
		{"exact one value differs", res(Eval17B, KindExact, "[-1.5, -2.25]"), res(Eval17B, KindExact, "[-1.5, -2.2500001]"), "not identical"},
		{"exact digest differs", res(Embed06B, KindExact, `["aa","bb"]`), res(Embed06B, KindExact, `["aa","bc"]`), "not identical"},
		{"losses identical", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, losses), ""},
		{"losses within tolerance", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, near), ""},
		{"losses outside tolerance", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, far), "relative difference"},
		{"losses fewer steps", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, "[10.5, 10.0, 9.5, 9.0]"), "4 losses"},
		{"losses not finite", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindLosses, "[1, 2, 3, 4, 1e400]"), "not a list"},
		{"kind differs", res(LoRA06B, KindLosses, losses), res(LoRA06B, KindExact, losses), "kind"},
		{"template differs", res(LoRA06B, KindLosses, losses), res(LoRA17B, KindLosses, losses), "template"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Compare(c.ref, c.got)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("want a match, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("want an error containing %q, got %v", c.wantErr, err)
			}
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("error %v does not wrap ErrMismatch", err)
			}
		})
	}
}

// The tolerance is checked at its edge both ways, so a changed constant or formula shows up.
func TestLossToleranceEdge(t *testing.T) {
	mk := func(last float64) Result {
		return res(ResNet50, KindLosses, "[1, 1, 1, 1, "+strconv.FormatFloat(last, 'g', -1, 64)+"]")
	}
	ref := mk(1) // mean 1
	// Moving one of five values by d moves the mean by d/5.
	inside := 1 + 5*LossRelTol*0.99
	outside := 1 + 5*LossRelTol*1.01
	if err := Compare(ref, mk(inside)); err != nil {
		t.Fatalf("just inside the tolerance: %v", err)
	}
	if err := Compare(ref, mk(outside)); err == nil {
		t.Fatal("just outside the tolerance: accepted")
	}
}

func TestCompareFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ref := write("ref.json", `{"template":"eval-1.7b","kind":"exact","values":[1,2],"meta":{"total_s":9}}`)
	same := write("same.json", `{"template":"eval-1.7b","kind":"exact","values":[1,2],"meta":{"total_s":12}}`)
	bad := write("bad.json", `{"template":"eval-1.7b","kind":"exact","values":[1,3]}`)
	broken := write("broken.json", `{"template":"eval-1.7b","kind":`)
	nokind := write("nokind.json", `{"template":"eval-1.7b","values":[1,2]}`)
	novalues := write("novalues.json", `{"template":"eval-1.7b","kind":"exact"}`)
	missing := filepath.Join(dir, "missing.json")

	if err := CompareFiles(ref, same); err != nil {
		t.Fatalf("same values, other meta: %v", err)
	}
	for name, p := range map[string]string{"different": bad, "broken": broken, "no kind": nokind, "no values": novalues, "missing": missing} {
		err := CompareFiles(ref, p)
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("%s: want ErrMismatch, got %v", name, err)
		}
	}
	if err := CompareFiles(missing, same); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "no exclusive reference") {
		t.Fatalf("missing reference: %v", err)
	}
}
