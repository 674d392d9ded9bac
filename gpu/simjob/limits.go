package simjob

import (
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/taskenv"
)

// EnvMPSLimit is the MPS per-client pinned device memory limit a job honours.
const EnvMPSLimit = gpu.EnvMPSLimit

// EnvCapBytes is the reservation's cap; a simulated job reports it but never obeys it.
const EnvCapBytes = taskenv.CapBytes
