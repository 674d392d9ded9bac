// Package testutil holds what the tests of several packages share, so each is written once: a
// fresh simulated GPU machine (NewSim) and a second handle on one (AttachSim), a wait for a
// condition that another goroutine or process makes true (Eventually), a buffer that a logger
// may write while the test reads it (Buffer), a stand-in task process that carries a
// reservation's environment (StartTask), a child whose stdout the test reads (StartPiped),
// the fake MPS control program with a short directory for its pipes (FakeMPSControl, MPSRoot), and
// a service's Run loop with the events it publishes recorded (Runner).
// Only tests and test rigs import it.
package testutil
