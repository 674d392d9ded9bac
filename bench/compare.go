package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
)

// Kinds of result a workload writes.
const (
	KindLosses = "losses" // training losses, one a step: compared with LossRelTol
	KindExact  = "exact"  // evaluation, embeddings, generated ids: must be identical
)

// Tolerances, fixed before the first measured run (BENCHMARK.md) and never loosened after it.
//
// LossRelTol: on the same H200, the mean of the last 5 losses of a LoRA job differed between
// runs by about 1e-6 relative, alone or packed (gpu-facts.md). 1e-3 is a thousand times that
// noise, so honest non-determinism (atomics, reduction order) passes with a wide margin, and it
// is still far below what a broken run produces: a different seed, lost steps or corrupted
// weights move the mean of the final losses of these jobs by whole percent (the synthetic data
// is learnable, so the losses fall steeply over the run and the tail mean depends on every step).
// Two exclusive runs of the same seed must agree within it; the benchmark reports when they don't.
const (
	LossRelTol    = 1e-3
	LossTailSteps = 5
)

// ErrMismatch is wrapped by every comparison failure.
var ErrMismatch = errors.New("result differs from the exclusive run")

// Result is what a workload writes: {"template", "kind", "values", "meta"}; meta is ignored.
type Result struct {
	Template string          `json:"template"`
	Kind     string          `json:"kind"`
	Values   json.RawMessage `json:"values"`
}

// LoadResult reads and checks one result file.
func LoadResult(path string) (Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Result{}, fmt.Errorf("result file: %w", err)
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return Result{}, fmt.Errorf("result file %s: %w", path, err)
	}
	if r.Kind != KindLosses && r.Kind != KindExact {
		return Result{}, fmt.Errorf("result file %s: kind %q is neither %q nor %q", path, r.Kind, KindLosses, KindExact)
	}
	if len(r.Values) == 0 || string(r.Values) == "null" {
		return Result{}, fmt.Errorf("result file %s: no values", path)
	}
	return r, nil
}

// Compare says whether got agrees with ref (the same job's exclusive run): nil when it does,
// else an error wrapping ErrMismatch that says how it differs.
func Compare(ref, got Result) error {
	if ref.Template != got.Template {
		return fmt.Errorf("%w: template %q, exclusive run %q", ErrMismatch, got.Template, ref.Template)
	}
	if ref.Kind != got.Kind {
		return fmt.Errorf("%w: kind %q, exclusive run %q", ErrMismatch, got.Kind, ref.Kind)
	}
	switch ref.Kind {
	case KindExact:
		var a, b any
		if err := json.Unmarshal(ref.Values, &a); err != nil {
			return fmt.Errorf("exclusive run's values: %w", err)
		}
		if err := json.Unmarshal(got.Values, &b); err != nil {
			return fmt.Errorf("%w: values do not parse: %w", ErrMismatch, err)
		}
		if !reflect.DeepEqual(a, b) {
			return fmt.Errorf("%w: %s values are not identical", ErrMismatch, ref.Template)
		}
		return nil
	case KindLosses:
		a, na, err := tailMean(ref.Values)
		if err != nil {
			return fmt.Errorf("exclusive run's losses: %w", err)
		}
		b, nb, err := tailMean(got.Values)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrMismatch, err)
		}
		if na != nb {
			return fmt.Errorf("%w: %d losses, exclusive run %d", ErrMismatch, nb, na)
		}
		if rel := RelDiff(a, b); !(rel <= LossRelTol) {
			return fmt.Errorf("%w: mean of the last %d losses %.9g vs %.9g, relative difference %.3g > %g",
				ErrMismatch, LossTailSteps, b, a, rel, LossRelTol)
		}
		return nil
	}
	return fmt.Errorf("kind %q: unknown", ref.Kind)
}

// RelDiff is |a-b| / |a|, with a zero reference giving |b| (so 0 vs 0 is 0). NaN stays NaN,
// which fails every tolerance check written as !(x <= tol).
func RelDiff(a, b float64) float64 {
	if a == 0 {
		return math.Abs(b)
	}
	return math.Abs(a-b) / math.Abs(a)
}

// tailMean is the mean of the last LossTailSteps losses, and how many losses there are.
func tailMean(raw json.RawMessage) (float64, int, error) {
	var v []float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, 0, fmt.Errorf("losses are not a list of numbers: %w", err)
	}
	if len(v) == 0 {
		return 0, 0, errors.New("no losses")
	}
	n := min(LossTailSteps, len(v))
	sum := 0.0
	for _, x := range v[len(v)-n:] {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, 0, fmt.Errorf("loss %v is not finite", x)
		}
		sum += x
	}
	return sum / float64(n), len(v), nil
}

// CompareFiles loads both files and compares them; a missing or broken file is a mismatch.
func CompareFiles(refPath, gotPath string) error {
	ref, err := LoadResult(refPath)
	if err != nil {
		return fmt.Errorf("%w: no exclusive reference: %w", ErrMismatch, err)
	}
	got, err := LoadResult(gotPath)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMismatch, err)
	}
	return Compare(ref, got)
}
