package simjob

import "github.com/gpufrac/gpufrac/gpu"

// EnvMPSLimit is the MPS per-client pinned device memory limit a job honours.
const EnvMPSLimit = gpu.EnvMPSLimit

// EnvCapBytes is the reservation's cap; a simulated job reports it but never obeys it.
const EnvCapBytes = "GPUFRAC_CAP_BYTES"
