package bench

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"time"

	"github.com/gpufrac/gpufrac/gpu/simjob"
)

// simShape is a simulated template: its peak as NVML sees it, the ramp from start-up to the
// peak and the time at the peak, at scale 1 (close to the H200 calibration in docs/benchmarks.md).
type simShape struct {
	peak        string
	ramp, hold  time.Duration
	leakTo      string
	leakPerSec  string
	resultKind  string
	resultCount int
}

var simShapes = map[string]simShape{
	LoRA06B:   {peak: "18.7GiB", ramp: 14 * time.Second, hold: 3 * time.Second, resultKind: KindLosses, resultCount: 12},
	LoRA17B:   {peak: "24.6GiB", ramp: 15 * time.Second, hold: 3 * time.Second, resultKind: KindLosses, resultCount: 12},
	FullFT06B: {peak: "28.9GiB", ramp: 12 * time.Second, hold: 3 * time.Second, resultKind: KindLosses, resultCount: 12},
	Eval17B:   {peak: "16.9GiB", ramp: 16 * time.Second, hold: 2 * time.Second, resultKind: KindExact, resultCount: 8},
	Embed06B:  {peak: "4.3GiB", ramp: 15 * time.Second, hold: 2 * time.Second, resultKind: KindExact, resultCount: 8},
	Gen17B:    {peak: "4.3GiB", ramp: 14 * time.Second, hold: 4 * time.Second, resultKind: KindExact, resultCount: 8},
	ResNet50:  {peak: "4.3GiB", ramp: 9 * time.Second, hold: 2 * time.Second, resultKind: KindLosses, resultCount: 12},
	// The leaker holds about 1 GiB for a small phase that outlasts every other template's ramp
	// (so a probe window that sees their peaks still sees a small leaker), then grows 20 GiB a
	// second, as the real one does, to 40 GiB (far past its cap; 100 GiB would only add time).
	Leaker: {peak: "1GiB", ramp: 8 * time.Second, hold: 16 * time.Second, leakTo: "40GiB", leakPerSec: "20GiB", resultKind: KindExact, resultCount: 2},
}

// SimJobMain is a simulated benchmark job: it runs gpu/simjob (a real process that takes memory
// on a simulated GPU, fails inside itself at an MPS limit, dies for real when killed) shaped
// like the template, and converts simjob's deterministic result into the workloads' result
// format. Flags: --template, --result, --scale (durations are multiplied by it). It returns the
// process exit code (simjob's).
func SimJobMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simjob", flag.ContinueOnError)
	fs.SetOutput(stderr)
	template := fs.String("template", "", "one of the benchmark templates")
	result := fs.String("result", os.Getenv("GPUFRAC_RESULT"), "where to write the result (default $GPUFRAC_RESULT)")
	scale := fs.Float64("scale", 1, "multiply every duration by this")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	shape, ok := simShapes[*template]
	if !ok {
		fmt.Fprintf(stderr, "simjob: --template %q is not a benchmark template\n", *template)
		return 2
	}
	if *result == "" || *scale <= 0 {
		fmt.Fprintf(stderr, "simjob: --result must be set and --scale (%g) positive\n", *scale)
		return 2
	}
	h := fnv.New64a()
	h.Write([]byte(*template))
	seed := int64(h.Sum64() >> 1)
	raw := *result + ".simjob"
	sargs := []string{"--peak", shape.peak, "--ramp", scaled(shape.ramp, *scale), "--hold", scaled(shape.hold, *scale),
		"--result", raw, "--seed", fmt.Sprint(seed)}
	if shape.leakTo != "" {
		// The rate is not scaled: the runner samples memory every 20 ms, and a leak that passed
		// the cap between two samples would look like an ordinary crash rather than a violation.
		sargs = append(sargs, "--leak-to", shape.leakTo, "--leak-rate", shape.leakPerSec)
	}
	if rc := simjob.Main(sargs, stdout, stderr); rc != 0 {
		return rc
	}
	if err := convertSimResult(raw, *result, *template, shape); err != nil {
		fmt.Fprintf(stderr, "simjob: %v\n", err)
		return 1
	}
	return 0
}

func scaled(d time.Duration, s float64) string {
	return time.Duration(float64(d) * s).String()
}

func convertSimResult(raw, path, template string, shape simShape) error {
	data, err := os.ReadFile(raw)
	if err != nil {
		return fmt.Errorf("simulated result: %w", err)
	}
	var r simjob.Result
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("simulated result %s: %w", raw, err)
	}
	if len(r.Values) == 0 {
		return errors.New("simulated result has no values")
	}
	vals := make([]float64, shape.resultCount)
	for i := range vals {
		vals[i] = r.Values[i%len(r.Values)] + float64(i)
	}
	out, err := json.Marshal(map[string]any{"template": template, "kind": shape.resultKind, "values": vals})
	if err != nil {
		return err
	}
	if err := writeAtomic(path, out); err != nil {
		return err
	}
	return os.Remove(raw)
}
