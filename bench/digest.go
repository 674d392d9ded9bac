package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// A reference exclusive run (--ref) checks the results of arms run in a later call: if the
// workload scripts, their sizes or their environment changed in between, every exact result
// differs and the run is wasted. On 2026-12-04 two start-up seeds were run against exclusive
// runs from before the workloads switched to strict deterministic mode, and 4 of 12 jobs "failed"
// in every arm. A summary records what its jobs were; a reference of other jobs is refused.

// Digester is a Workloads that can say what its jobs are, as a digest that changes whenever
// their results may.
type Digester interface {
	Digest() (string, error)
}

// Digest covers every Python file of the workloads directory, the profile and the extra
// environment: what decides a job's results. The interpreter, the cache and the GPU's size do
// not enter it (the same code on another machine is the same job; the tolerances cover the rest).
func (w PythonWorkloads) Digest() (string, error) {
	files, err := filepath.Glob(filepath.Join(w.Dir, "*.py"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("workloads %s: no Python files to digest (%v)", w.Dir, err)
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("workloads digest: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "profile=%s\x00", w.Profile.orStartup())
	keys := make([]string, 0, len(w.Env))
	for k := range w.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\x00", k, w.Env[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// workloadsDigest is the run's digest, or "" with a note where its workloads give none.
func workloadsDigest(w Workloads) (string, string) {
	d, ok := w.(Digester)
	if !ok {
		return "", ""
	}
	s, err := d.Digest()
	if err != nil {
		return "", "no workloads digest recorded: " + err.Error()
	}
	return s, ""
}

// checkRefDigest refuses a reference whose jobs were other than this run's; a reference that
// recorded none (written before 2026-12-04, or of workloads without a digest) passes with a note.
func checkRefDigest(refDir, ref, mine string) (note string, err error) {
	switch {
	case ref == "" && mine != "":
		return fmt.Sprintf("the reference %s recorded no workloads digest: if its workload scripts or sizes differ from this run's (%s), its exact results will not match", refDir, mine), nil
	case ref != "" && mine != "" && ref != mine:
		return "", fmt.Errorf("reference %s ran other workloads (digest %s; this run's %s): the scripts, their sizes or --job-env changed since, so its exact results would not match this run's; run the seed's exclusive arm again with this tree",
			refDir, ref, mine)
	}
	return "", nil
}
