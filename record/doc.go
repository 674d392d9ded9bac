// Package record is the vocabulary of what a run did: the typed values a run is configured by
// (Arm, Profiles) and ends with (Outcome), one Attempt per process run of a job, the run's
// Result with its accounting (makespan, time use, per-GPU rates, the one-at-a-time estimate),
// and the writers of results.json and attempts.csv. The runner fills these records and the
// benchmark and the report read them, so all three count the same way.
package record
