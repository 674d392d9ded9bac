// Package simjob is a simulated GPU job: a real process that takes memory on a GPU of the
// simulated backend the way a CUDA program does, so CI, demos and tests exercise real process
// life cycles (start, growth, crash, SIGTERM, SIGKILL) without a GPU.
//
// A job allocates a CUDA context (--context), grows linearly to --peak over --ramp, holds it for
// --hold, optionally keeps leaking toward --leak-to at --leak-rate per second, writes a
// deterministic result (--result, from --seed) and exits 0. While alive it reports its usage in
// the simulated backend's state directory about 50 times a second, and removes the report when
// it exits; after a SIGKILL the backend's dead-process check frees the memory.
//
// Like a CUDA program, an allocation fails inside the process (exit 1, "CUDA out of memory" on
// stderr) when it would pass the MPS pinned-memory limit in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT or
// the GPU's free memory. GPUFRAC_CAP_BYTES is printed but never obeyed: in isolated mode the
// watchdog must catch an overshoot, and a job that limited itself would hide a watchdog bug.
//
// Under the allocation fence (GPUFRAC_FENCE_DIR and a reservation in its environment) a job
// charges its growth past its context to its task's fence table, as the preload library does
// for a CUDA program, through the Fence that enforcer/fence hands it (UseFence, from that
// package's init: any program that links the fence fences its simulated jobs).
//
// A job with --mps-fault models an MPS client that faults when another client of its GPU is
// stopped (exit 1, cudaErrorIllegalAddress): see mpsfault.go.
//
// Exit codes: 0 done, 1 crash or out of memory (or a failed child process), 2 bad usage,
// 130 after SIGINT, 143 after SIGTERM.
//
// # Running simulated jobs from tests
//
// The gpufrac CLI runs a job as the hidden subcommand `gpufrac simjob ...`. Tests of any package
// can run jobs without building that binary by re-executing their own test binary:
//
//	func TestMain(m *testing.M) {
//		simjob.RunIfChild() // exits here when this process is a simulated job
//		os.Exit(m.Run())
//	}
//
//	cmd, err := simjob.Command(ctx, "--dir", sim.Dir(), "--gpu", uuid, "--peak", "2GiB", "--hold", "1s")
//
// Command sets GPUFRAC_SIMJOB=1 in the child's environment, which RunIfChild recognises.
package simjob
