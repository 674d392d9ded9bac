// Package enforcer keeps tasks inside their caps: it builds the environment a task runs with,
// drives the MPS control daemons (enforcer/mps owns their life cycle), and runs the watchdog
// that catches and stops a task that outgrows its cap without harming its neighbours.
//
// # Using the enforcer
//
// The plugin and `gpufrac run` build one Enforcer per node:
//
//	enf, err := enforcer.New(enforcer.Config{Backend: be, Ledger: led, Logger: log})
//	go enf.Run(ctx)                        // watchdog, token scan, unmanaged use, MPS health
//	err = enf.PrepareGPU(ctx, uuid)        // before a task starts: MPS daemon up in mps mode
//	env := enforcer.TaskEnv(res, state, enf.EnvOptions(uuid))
//	used, ok := enf.TaskUsage(res.Token)   // Stats
//	events, stop := enf.Subscribe()        // violations, unmanaged use, MPS and health changes
//	err = enf.Shutdown(ctx)                // quits MPS daemons that have no client
//
// # The watchdog
//
// One pass over a GPU is a sample and a decision. The shell (watchdog.go) reads NVML, the
// process table and the fence's table into an observation; decide (decide.go) judges it against
// what earlier passes left (violations in progress, tasks met at their cap, what borrowers held)
// and returns actions: stop these processes with this signal, record this violation, mark this
// GPU, report this event. The shell carries them out. Passes run one at a time whoever calls
// them (Run, Tick): a mutex, not a convention, keeps them apart.
//
// Config.Procs (ProcSource) and Config.Signal are seams for tests; MPSOptions.ControlBinary may name
// a fake control program (testdata/fake-mps-control). docs/enforcement.md says what each mode
// guarantees and why.
package enforcer
