package runner

import (
	"fmt"

	"github.com/gpufrac/gpufrac/record"
)

// retry decides whether a job whose attempt failed is started again: only under an admission
// rule that retries (Admission.Retries: a rule without caps has none to raise, so a retry loop
// around each job is its ladder), at once (a retry loop does not wait for the GPU to have room),
// and at most that many times. The failed attempt keeps its outcome, so its time counts as lost
// work.
func (r *run) retry(j *jobState, at *record.Attempt) bool {
	n := 0
	if r.s.adm != nil {
		n = r.s.adm.Retries()
	}
	if j.retries >= n {
		return false
	}
	j.retries++
	at.Detail = fmt.Sprintf("%s; started again (retry %d of %d)", at.Detail, j.retries, n)
	return true
}
