// Package varserver is an in-process Nomad Variables HTTP server for tests (plus the few job,
// allocation and event-stream endpoints of jobs.go). It implements the
// parts of /v1/var/<path> and /v1/vars that gpufrac uses (reads, upserts, check-and-set,
// deletes, prefix lists across namespaces, blocking queries, ACL tokens and Nomad's limits),
// written from the documented behaviour, so the real github.com/hashicorp/nomad/api client can
// talk to it. It is not a Nomad server: there is no raft, no encryption, no locks and no
// filter expressions (those answer 400). It listens on 127.0.0.1 only. Server.Client is a Nomad
// API client of it for a test.
package varserver
