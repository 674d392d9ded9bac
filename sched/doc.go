// Package sched is the scheduler of `gpufrac run`: which queued job starts where, round by
// round. It has one admission rule, packed (caps from measured footprints, probes alone or in
// place, drains for a job that needs a GPU alone, borrowing), and admits every job through the
// node's one admission transaction (node.Admit), as the plugin does. The benchmark's baselines
// replace the packed rule through Admission (bench/arms). It touches the ledger but no
// processes: the runner starts, follows and ends the attempts it launches.
package sched
