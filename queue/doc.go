// Package queue reads queue files: the HCL a person writes to hand `gpufrac run` a list of jobs
// (commands, templates, working directories, result files), with optional template specs
// (declared peaks and caps, probe windows), a policy block and the run's defaults (arm,
// profiles, simulated GPUs). Errors name the file, the line and the bad value, all of them at
// once (Error). What the runner does with a queue is the runner's business.
package queue
