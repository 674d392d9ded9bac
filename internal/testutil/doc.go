// Package testutil holds what the tests of several packages share, so each is written once: a
// fresh simulated GPU machine (NewSim), a wait for a condition that another goroutine or process
// makes true (Eventually), and a buffer that a logger may write while the test reads it (Buffer).
// Only tests and test rigs import it.
package testutil
