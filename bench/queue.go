package bench

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/size"
)

// The eight templates of the benchmark, in a fixed order (the order matters for Draw).
const (
	LoRA06B   = "lora-0.6b"
	LoRA17B   = "lora-1.7b"
	FullFT06B = "fullft-0.6b"
	Eval17B   = "eval-1.7b"
	Embed06B  = "embed-0.6b"
	Gen17B    = "generate-1.7b"
	ResNet50  = "resnet50"
	Leaker    = "leaker"
)

// Templates lists every template; Leaker is last.
var Templates = []string{LoRA06B, LoRA17B, FullFT06B, Eval17B, Embed06B, Gen17B, ResNet50, Leaker}

// Scripts maps each template to its file under examples/workloads.
var Scripts = map[string]string{
	LoRA06B: "lora_06b.py", LoRA17B: "lora_17b.py", FullFT06B: "fullft_06b.py",
	Eval17B: "eval_17b.py", Embed06B: "embed_06b.py", Gen17B: "generate_17b.py",
	ResNet50: "resnet50.py", Leaker: "leaker.py",
}

// QueueLen is the number of jobs in every benchmark queue.
const QueueLen = 12

// PublishedSeeds are the seeds whose results are published; any seed works.
var PublishedSeeds = []uint64{1, 2, 3}

// Entry is one job of a drawn queue.
type Entry struct {
	Name     string // unique in the queue: "j03-eval-1.7b"
	Template string
}

// Draw returns the queue of seed: QueueLen jobs, exactly one of them the leaker, every other
// template at least once (so each seed exercises every kind of job), the remaining places drawn
// uniformly from the non-leaker templates, all in an order fixed by the seed. The generator is
// SplitMix64, written out here so a queue never changes with the Go version.
func Draw(seed uint64) []Entry {
	r := splitmix{state: seed}
	others := Templates[:len(Templates)-1]
	picks := append([]string{Leaker}, others...)
	for len(picks) < QueueLen {
		picks = append(picks, others[r.intn(len(others))])
	}
	// Fisher-Yates with the same generator.
	for i := len(picks) - 1; i > 0; i-- {
		j := r.intn(i + 1)
		picks[i], picks[j] = picks[j], picks[i]
	}
	out := make([]Entry, len(picks))
	for i, t := range picks {
		out[i] = Entry{Name: fmt.Sprintf("j%02d-%s", i+1, t), Template: t}
	}
	return out
}

type splitmix struct{ state uint64 }

func (s *splitmix) next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn is uniform on [0, n) by rejection, so small n carry no modulo bias.
func (s *splitmix) intn(n int) int {
	if n <= 0 {
		panic("intn: n must be positive")
	}
	limit := ^uint64(0) - (^uint64(0) % uint64(n))
	for {
		if v := s.next(); v < limit {
			return int(v % uint64(n))
		}
	}
}

// Workloads turns a template and a result path into the command and environment of one job.
type Workloads interface {
	Command(template, result string) (cmd []string, env map[string]string, err error)
}

// PythonWorkloads runs the real PyTorch jobs of examples/workloads.
type PythonWorkloads struct {
	Python string // interpreter, e.g. "python3"
	Dir    string // the examples/workloads directory
	Cache  string // checkpoint directory written by prepare.py (GPUFRAC_CACHE)
	// Profile sizes the jobs (ProfileEnv); "" is ProfileStartup, the scripts' defaults.
	Profile WorkloadProfile
	// Env is added to every job's environment after the profile's sizes, so it wins over them
	// (size overrides for smoke runs, for example).
	Env map[string]string
	// GPUBytes is the physical memory of the GPUs the jobs run on (0: unknown). The leaker grows
	// to a share of it: inside a capped task CUDA reports the task's guarantee as the device's
	// size, and a leaker that sized itself from that would grow to its guarantee in the packed
	// arms and to the whole GPU in the exclusive one.
	GPUBytes size.Bytes
}

// Command implements Workloads.
func (w PythonWorkloads) Command(template, result string) ([]string, map[string]string, error) {
	script, ok := Scripts[template]
	if !ok {
		return nil, nil, fmt.Errorf("template %q: not one of %s", template, strings.Join(Templates, ", "))
	}
	py := w.Python
	if py == "" {
		py = "python3"
	}
	env := map[string]string{"PYTHONUNBUFFERED": "1"}
	if w.Cache != "" {
		env["GPUFRAC_CACHE"] = w.Cache
	}
	if template == Leaker && w.GPUBytes > 0 {
		env["GPUFRAC_LEAK_DEVICE_BYTES"] = strconv.FormatUint(uint64(w.GPUBytes), 10)
	}
	for k, v := range ProfileEnv(w.Profile, template) {
		env[k] = v
	}
	for k, v := range w.Env {
		env[k] = v
	}
	return []string{py, filepath.Join(w.Dir, script), result}, env, nil
}

// SimWorkloads runs simulated jobs (see SimJob): Program is the command that reaches SimJob,
// e.g. ["gpufrac-bench", "simjob"]; the template, result and scale are appended as flags.
type SimWorkloads struct {
	Program []string
	// Scale multiplies every simulated duration (1 = the real workloads' calibrated length).
	Scale float64
	// Profile picks the simulated shapes of that workload profile ("" is ProfileStartup).
	Profile WorkloadProfile
	Env     map[string]string
}

// Command implements Workloads.
func (w SimWorkloads) Command(template, result string) ([]string, map[string]string, error) {
	if _, ok := Scripts[template]; !ok {
		return nil, nil, fmt.Errorf("template %q: not one of %s", template, strings.Join(Templates, ", "))
	}
	if len(w.Program) == 0 {
		return nil, nil, fmt.Errorf("simulated workloads: no program to run")
	}
	scale := w.Scale
	if scale <= 0 {
		scale = 1
	}
	cmd := append(append([]string{}, w.Program...), "--template", template, "--result", result,
		"--scale", fmt.Sprintf("%g", scale), "--profile", string(w.Profile.orStartup()))
	env := map[string]string{}
	for k, v := range w.Env {
		env[k] = v
	}
	return cmd, env, nil
}
