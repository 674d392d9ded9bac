// Package nomadvars is policy's store in Nomad Variables: policies at gpufrac/policy/<name> and
// templates at gpufrac/templates/<name>, with check-and-set writes and blocking reads for the
// watcher (Store), and the one way every gpufrac part builds a Nomad API client from an address,
// a token or token file and a namespace (NewAPIClient). Keeping the Nomad API here, beside
// policy/violations and the controller, leaves ledger/, policy itself and gpu/ free of Nomad
// (scripts/check-deps.sh holds that line).
package nomadvars
