// Package node is one machine's GPUs under gpufrac, assembled once: it opens the ledger
// (releasing the reservations of holders that are gone), records the backend's GPUs, builds the
// enforcer with its allocation fence and the borrowing rule, and admits a task in one
// transaction (Admit: reserve, ready the GPU, write the fence's table, build the environment)
// that undoes itself when a step fails. The Nomad plugin translates Nomad's calls into it,
// `gpufrac run` schedules and supervises jobs on it, and `gpufrac probe` is one admission on it.
package node
