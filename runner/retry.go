package runner

import (
	"fmt"

	"github.com/gpufrac/gpufrac/record"
)

// uncappedRetries is how often the uncapped-retry arm starts a failed job again (a job runs at
// most 1+uncappedRetries attempts), as a retry loop around each job would.
const uncappedRetries = 3

// retry decides whether a job whose attempt failed is started again: only in the uncapped-retry
// arm, at once (a retry loop does not wait for the GPU to have room), and at most
// uncappedRetries times. The failed attempt keeps its outcome, so its time counts as lost work.
func (r *run) retry(j *jobState, at *record.Attempt) bool {
	if r.o.Arm != record.ArmUncappedRetry || j.retries >= uncappedRetries {
		return false
	}
	j.retries++
	at.Detail = fmt.Sprintf("%s; started again (retry %d of %d)", at.Detail, j.retries, uncappedRetries)
	return true
}
