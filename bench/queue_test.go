package bench

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

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
