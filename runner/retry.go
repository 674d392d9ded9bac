package runner

import (
	"fmt"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/sched"
)

// retry decides whether a job whose attempt failed is started again: only under an admission
// rule that retries (Admission.Retries: a rule without caps has none to raise, so a retry loop
// around each job is its ladder), at once (a retry loop does not wait for the GPU to have room),
// and at most that many times. The failed attempt keeps its outcome, so its time counts as lost
// work.
func (r *run) retry(j *sched.Job, at *record.Attempt) bool {
	n := 0
	if r.o.Admission != nil {
		n = r.o.Admission.Retries()
	}
	if j.Retries >= n {
		return false
	}
	j.Retries++
	at.Detail = fmt.Sprintf("%s; started again (retry %d of %d)", at.Detail, j.Retries, n)
	return true
}
