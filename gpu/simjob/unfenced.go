package simjob

import "github.com/gpufrac/gpufrac/size"

// unfenced is the memory NVML counts for a job holding want (as the fence sees it) that the
// fence never charged, the two ways measured on the H200 (docs/enforcement.md): a process of
// the task that dropped its reservation token (--outside-fence, held from the job's first
// allocation past its context on), and an allocator pool that keeps more than it was charged
// (--pool-slack, while the job holds anything past its context). A runner or plugin test that
// uses them sees what the watchdog, not the fence, must catch.
func (j *job) unfenced(want size.Bytes) size.Bytes {
	if !j.ctxSet || want <= j.ctx {
		return 0
	}
	return j.c.outsideFence + min(j.c.poolSlack, want-j.ctx)
}
