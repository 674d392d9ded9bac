package record

// perGPUTotals fills each GPU's Completed (jobs whose final attempt exited 0 on that GPU) and
// JobsPerGPUHour (those jobs over the run's makespan). The run's JobsPerGPUHour is their mean:
// completed jobs / (makespan x GPUs).
func perGPUTotals(res *Result) {
	last := map[string]Attempt{} // a job's final attempt; res.Attempts is in start order
	for _, a := range res.Attempts {
		last[a.Job] = a
	}
	at := map[string]int{}
	for i, g := range res.GPUs {
		at[g.UUID] = i
		res.GPUs[i].Completed, res.GPUs[i].JobsPerGPUHour = 0, 0
	}
	for _, j := range res.Jobs {
		a, ok := last[j.Name]
		if i, on := at[a.GPU]; ok && on && j.Outcome == OutcomeOK {
			res.GPUs[i].Completed++
		}
	}
	if ms := res.Makespan(); ms > 0 {
		for i := range res.GPUs {
			res.GPUs[i].JobsPerGPUHour = float64(res.GPUs[i].Completed) / ms.Hours()
		}
	}
}
