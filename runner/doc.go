// Package runner is the engine behind `gpufrac run`: given a parsed queue (queue/), it measures
// or reuses each template's footprint, admits jobs on the node (node/, opened in enforce.go)
// while their caps fit (sched.go, borrow.go: the scheduler, changed only through its methods),
// starts and samples each attempt's processes and follows them to their end under the node's
// enforcer (loop.go, sample.go), re-runs a job that breaks its cap alone on a whole GPU, and hands the
// run's records (record/) to the writers of results.json, attempts.csv and report.html
// (report/). It prints progress as it goes (progress.go, runstatus.go for `gpufrac status`).
//
// "Probe" means three things in this tree: the probe package (starting a job in its own process
// group, measuring one job alone), `gpufrac probe` (the command that measures one job and
// stores a template), and here a probe attempt: a template's first job, run to measure its
// footprint, alone or in place beside others under a protective cap (launch.inPlace).
//
// The runner is also the benchmark's harness. Its scheduler has one admission rule, packed; the
// benchmark's baselines (exclusive, static, uncapped, uncapped-retry) replace it through the
// Admission interface (admission.go), which bench/arms implements.
package runner
