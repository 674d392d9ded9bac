// Package attribution is the one place that decides whose GPU memory a process's is. An
// Attributor reads each process once through procfs (its environment, cgroup, command line and
// parent chain, cached under its PID and start time) and ties a GPU process to one of the live
// Tasks, in this order:
//
//  1. the task's root process itself (gpufrac run and gpufrac probe start each job as the leader
//     of its own process group);
//  2. the reservation token in its environment: GPUFRAC_RESERVATION, or the per-GPU
//     GPUFRAC_RESERVATION_<uuid> a task of several device requests carries;
//  3. the Nomad allocation ID in its cgroup, when one task of that allocation is on the GPU (or
//     the task name in the cgroup path picks one) and a process read earlier that carries that
//     task's token lives in the same cgroup or one above it;
//  4. membership of a task root's process group;
//  5. its nearest ancestor that is a task's root or carries a task's token (a worker whose
//     environment was scrubbed, a child whose own environ is unreadable, one started with
//     setsid).
//
// A process none of these ties is unmanaged, with a note saying why when there is one (a token
// of another GPU's reservation, a token no reservation has, an unreadable environment). The MPS
// server is neither. The enforcer's watchdog, `gpufrac probe`, `gpufrac run`'s supervision and
// `gpufrac status` all split a GPU's processes with Split. Rule 3 knows a task's token carriers
// only from processes read before, and only the token scan (Scan) reads a carrier that holds no
// GPU memory: the watchdog and `gpufrac status`, whose tasks may be Nomad's, scan before they
// split, so the two tie the same processes to the same tasks.
package attribution
