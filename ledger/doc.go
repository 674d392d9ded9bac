// Package ledger is the per-GPU admission ledger: capacity per GPU, reservations, admission,
// violations and footprint profiles, committed to JSON files that survive kill -9 and that
// `gpufrac status` reads without a lock. See docs/ledger.md.
package ledger
