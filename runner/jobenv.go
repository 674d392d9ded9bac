package runner

import (
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/taskenv"
)

// command resolves the word "gpufrac" to this binary, so queue files run anywhere, and
// expands $GPUFRAC_* references to the job's own values (no shell is involved).
func (r *run) command(c []string, env map[string]string) []string {
	out := append([]string(nil), c...)
	if out[0] == "gpufrac" && r.o.Self != "" {
		out[0] = r.o.Self
	}
	for i := 1; i < len(out); i++ {
		if strings.Contains(out[i], "$GPUFRAC_") || strings.Contains(out[i], "${GPUFRAC_") {
			out[i] = os.Expand(out[i], func(k string) string {
				if v, ok := env[k]; ok && strings.HasPrefix(k, "GPUFRAC_") {
					return v
				}
				return "$" + k
			})
		}
	}
	return out
}

// resultPath is where a job's result goes: relative paths live in the results directory.
func (r *run) resultPath(j *sched.Job) string { return resultIn(r.o.OutDir, j.Result) }

// resultIn is where a result named result goes with the results directory outDir ("" for none).
func resultIn(outDir, result string) string {
	if result == "" || filepath.IsAbs(result) {
		return result
	}
	abs, err := filepath.Abs(filepath.Join(outDir, result))
	if err != nil {
		return filepath.Join(outDir, result)
	}
	return abs
}

// within says whether the absolute path p is dir (absolute or not) or lies under it.
func within(dir, p string) bool {
	d, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	_, ok := record.Within(d, p)
	return ok
}

func (r *run) env(l sched.Launch, token string, j *sched.Job) map[string]string {
	env := map[string]string{}
	maps.Copy(env, r.o.ExtraEnv)
	if sim, ok := r.o.Backend.(*gpu.Simulated); ok {
		env[gpu.EnvSimDir] = sim.Dir()
	}
	maps.Copy(env, j.Env)
	// The node wrote a capped job's cap into the fence's table when it admitted it; a job with
	// no reservation has nothing for the fence to hold.
	res := l.Res
	res.Token = token
	tenv, err := r.node.Env(res, !l.Capped)
	if err != nil {
		r.log.Warn("GPU state for the job's environment", "gpu", l.GPU, "error", err)
	}
	maps.Copy(env, tenv)
	env[taskenv.Preload] = preloads(tenv[taskenv.Preload], j.Env[taskenv.Preload])
	if env[taskenv.Preload] == "" {
		delete(env, taskenv.Preload)
	}
	env[taskenv.Template] = j.Template
	env[taskenv.Job] = j.Name
	if p := r.resultPath(j); p != "" {
		env[taskenv.Result] = p
	}
	return env
}

// preloads is LD_PRELOAD for a job whose attempt gpufrac preloads fence into (empty: none) and
// that asked for own itself: the fence first, so it sees the CUDA calls before any library the
// job preloads, and the job's own kept (a job's env once lost its LD_PRELOAD to the fence's).
func preloads(fence, own string) string {
	switch {
	case fence == "":
		return own
	case own == "":
		return fence
	}
	return fence + ":" + own
}
