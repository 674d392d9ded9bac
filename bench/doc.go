// Package bench is the packing benchmark: it draws seeded queues of real AI jobs, runs them
// through the runner in each arm (exclusive, packed, static, uncapped, cold and warm profiles),
// checks every job's result against the same job's exclusive run with tolerances fixed in code,
// scores completed jobs per GPU-hour and writes the tables and raw records that
// docs/benchmarks.md publishes. Queues come in two workload profiles (start-up heavy jobs, and
// busy ones sized to keep the SMs 55-65% active alone); every arm's SM use is read through the
// gpu backend's GPM sampler and reported against the SM bound, and results are judged against
// the A/A noise of two exclusive runs. See ../shared/design/BENCHMARK.md for what is measured.
package bench
