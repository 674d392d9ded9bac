# The ladder's GPU suite (issue: a violation always converges): seven ways to break a cap and a
# runaway, each 8 GiB guarantee asking for 12 GiB (the runaway for everything), beside four busy
# neighbours whose results must match their solo runs (solo.json). Run on the GPU machine by
# leakers.sh, with borrowing on (--borrow wait) and off. Every leaker must end within
# max_attempts (3), ok or exhausted, never looping.

profiles     = "cold"
max_attempts = 3
borrow_wait  = "5s"

policy {
  headroom          = "2GiB"
  max_tasks_per_gpu = 16
  mode              = "isolated"
}

template "leaker" {
  cap = "8GiB"
}

template "neighbour" {
  cap = "6GiB"
}

job "neighbour-1" {
  template = "neighbour"
  dir      = "."
  command  = ["python3", "workload.py", "matmul", "--size", "8192", "--iters", "600", "--hold-mb", "2048", "--seed", "1", "--out", "$GPUFRAC_RESULT"]
  result   = "results/neighbour-1.json"
}

job "neighbour-2" {
  template = "neighbour"
  dir      = "."
  command  = ["python3", "workload.py", "matmul", "--size", "8192", "--iters", "600", "--hold-mb", "2048", "--seed", "2", "--out", "$GPUFRAC_RESULT"]
  result   = "results/neighbour-2.json"
}

job "neighbour-3" {
  template = "neighbour"
  dir      = "."
  command  = ["python3", "workload.py", "matmul", "--size", "8192", "--iters", "600", "--hold-mb", "2048", "--seed", "1", "--out", "$GPUFRAC_RESULT"]
  result   = "results/neighbour-3.json"
}

job "neighbour-4" {
  template = "neighbour"
  dir      = "."
  command  = ["python3", "workload.py", "matmul", "--size", "8192", "--iters", "600", "--hold-mb", "2048", "--seed", "2", "--out", "$GPUFRAC_RESULT"]
  result   = "results/neighbour-4.json"
}

job "leak-caching" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "grow", "--to-mb", "12288", "--step-mb", "512", "--interval", "0.05", "--seconds", "3", "--out", "$GPUFRAC_RESULT"]
  result   = "results/leak-caching.json"
}

job "leak-async" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "grow", "--to-mb", "12288", "--step-mb", "512", "--interval", "0.05", "--seconds", "3", "--out", "$GPUFRAC_RESULT"]
  env      = { PYTORCH_CUDA_ALLOC_CONF = "backend:cudaMallocAsync" }
  result   = "results/leak-async.json"
}

job "leak-expandable" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "grow", "--to-mb", "12288", "--step-mb", "512", "--interval", "0.05", "--seconds", "3", "--out", "$GPUFRAC_RESULT"]
  env      = { PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True" }
  result   = "results/leak-expandable.json"
}

job "leak-raw" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "fill", "--raw", "--strict", "--chunk-mb", "512", "--target-mb", "12288", "--out", "$GPUFRAC_RESULT"]
  result   = "results/leak-raw.json"
}

job "leak-token-child" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "escape", "--drop", "token", "--mb", "12288", "--seconds", "3", "--out", "$GPUFRAC_RESULT"]
  result   = "results/leak-token-child.json"
}

job "leak-preload-child" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "escape", "--drop", "preload", "--mb", "12288", "--seconds", "6", "--out", "$GPUFRAC_RESULT"]
  result   = "results/leak-preload-child.json"
}

job "leak-two-procs" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "pair", "--strict", "--mb", "6144", "--out", "$GPUFRAC_RESULT"]
  result   = "results/leak-two-procs.json"
}

job "runaway" {
  template = "leaker"
  dir      = "."
  command  = ["python3", "fence.py", "runaway", "--after", "2", "--chunk-mb", "2048", "--out", "$GPUFRAC_RESULT"]
  result   = "results/runaway.json"
}
