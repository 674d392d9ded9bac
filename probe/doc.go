// Package probe is the one home of measuring a job's GPU memory footprint, for `gpufrac probe`
// and the runner alike:
//
//   - starting a job in its own process group (Start, Proc, Environ), so that attribution
//     (package attribution) finds its whole process tree by its root, and keeping its last
//     words (Tail): the runner starts its attempts with these;
//   - measuring one job alone on a GPU, the whole run or a window from its first GPU memory,
//     at a high rate (Run: what `gpufrac probe` does), and the share of its run the SMs were
//     active (SMMeter);
//   - learning a template's SM-active share from the attempts of a run that had their GPU
//     alone, into the template's ledger profile (Shares: what `gpufrac run` does);
//   - turning the peak into what it earns under a policy (Earned: the cap of the policy's
//     formula and its memory units) and into the template's stored footprint (StoreTemplate).
//
// The ledger's profile record of a footprint is the ledger's (ledger.Profile); the runner's
// probe attempt, a template's first job run to learn its footprint, is the runner's.
package probe
