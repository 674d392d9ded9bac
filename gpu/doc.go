// Package gpu is the one place in gpufrac that touches GPUs. Everything else sees the Backend
// interface: the NVML implementation on real machines, the simulated one in CI, demos and tests.
package gpu
