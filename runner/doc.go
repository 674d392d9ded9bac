// Package runner is the engine behind `gpufrac run`: given a parsed queue (queue/), it opens the
// node (node/, in enforce.go), lets the scheduler (sched/) admit jobs on it while their caps
// fit, starts each attempt and follows it to its end under the node's enforcer (loop.go,
// sample.go), applies the ladder after a failure (ladder.go), learns its templates' footprints
// and SM-active shares (learn.go; probe.Shares meters), and hands the run's records (record/) to
// the writers of results.json, attempts.csv and report.html (report/). What it shows goes
// through progress/ (the terminal) and runstatus/ (`gpufrac status`); which failures were a
// GPU-wide event's is collateral/'s to say.
//
// "Probe" means three things in this tree: the probe package (starting a job in its own process
// group, measuring one job alone), `gpufrac probe` (the command that measures one job and
// stores a template), and here a probe attempt: a template's first job, run to measure its
// footprint, alone or in place beside others under a protective cap (sched.Launch.InPlace).
//
// The runner is also the benchmark's harness: the benchmark's baselines (exclusive, static,
// uncapped, uncapped-retry) replace the scheduler's packed rule through Options.Admission
// (sched.Admission), which bench/arms implements.
package runner
