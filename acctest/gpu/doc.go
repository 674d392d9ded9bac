// Package gpuacc holds gpufrac's acceptance tests on a real NVIDIA GPU: the enforcer over the NVML
// backend, driving small PyTorch jobs (testdata/workload.py). They run only with
// GPUFRAC_GPU_TESTS=1, on a machine with one GPU, python3 with torch and (for the mps tests)
// nvidia-cuda-mps-control on PATH. GPUFRAC_GPU_OUT names a directory for result lines and logs.
//
//	CGO_ENABLED=1 go test -c -o gpu.test ./acctest/gpu
//	GPUFRAC_GPU_TESTS=1 GPUFRAC_GPU_OUT=/tmp/out ./gpu.test -test.v -test.bench . -test.benchtime 1x
package gpuacc
