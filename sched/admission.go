package sched

import (
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// Admission is an admission rule other than the scheduler's own. It has one rule, packed: caps
// from measured footprints, probes, borrowing, the ladder. The benchmark's baselines, which
// packing is measured against (exclusive, static, uncapped, uncapped-retry), replace it through
// this seam; bench/arms supplies them, and `gpufrac run --arm` picks one there.
type Admission interface {
	// Arm names the rule; the run's records and progress lines carry it.
	Arm() record.Arm
	// PerGPU is how many jobs may run on one GPU at once, given the policy's max_tasks_per_gpu.
	PerGPU(policyMax int) int
	// Alone says whether a job runs alone with the whole GPU; rerun is set for a job whose cap
	// broke, which the ladder sends to a GPU of its own.
	Alone(rerun bool) bool
	// Share is the guarantee a job that runs beside others holds on a GPU in state st, and
	// whether it is a cap the enforcer holds; (0, false): it holds no reservation at all.
	Share(st ledger.GPUState) (size.Bytes, bool)
	// Retries is how often a failed attempt of a job is started again as it was.
	Retries() int
}
