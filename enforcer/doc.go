// Package enforcer keeps tasks inside their caps: it builds the environment a task runs with,
// owns the MPS control daemon's life cycle, and runs the watchdog that catches and stops a task
// that outgrows its cap without harming its neighbours.
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
// Config.Procs (ProcSource) and Config.Signal are seams for tests; MPSOptions.ControlBinary may name
// a fake control program (testdata/fake-mps-control). docs/enforcement.md says what each mode
// guarantees and why.
package enforcer
