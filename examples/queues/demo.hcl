# The gpufrac demo: eight simulated jobs on one simulated 80 GiB GPU, in well under a minute.
#
#   make demo        (or: gpufrac run --gpu-backend auto examples/queues/demo.hcl)
#
# Every job is `gpufrac simjob`: a real process that takes simulated GPU memory the way a CUDA
# program does (a context, a ramp to its peak, a hold). On a machine with an NVIDIA GPU the
# same file would need real commands instead; see docs/run.md.
#
# What to watch for:
#   - the first job of each template is its probe: in isolated mode it runs beside the others
#     under a protective cap (half the GPU's budget: 39GiB here); its measured peak becomes the
#     template's footprint, and its cap is peak x 1.15 + 1.5 GB;
#   - the other jobs are packed next to each other while their caps fit;
#   - "leaker" looks small during its 1 s probe window, so its cap comes down to a small one
#     and it runs on; then it keeps allocating past that cap: the allocation fence refuses the
#     allocation (without the fence, the watchdog stops it), it fails alone, its neighbours
#     carry on, and once the rest of the queue has started it is re-run with the whole GPU;
#   - the summary table, the throughput against one-job-at-a-time, and report.html.

# Probe every template on each demo run, so that the leaker is caught every time.
profiles = "cold"

gpus {
  # Used when no NVIDIA GPU is found (or with --gpu-backend simulated).
  simulated = ["H100=80GiB"]
}

policy {
  headroom          = "2GiB"
  cap_margin_percent = 15
  cap_margin        = "1.5GB"
  max_tasks_per_gpu = 6
  mode              = "isolated"
}

# Every template a job names is declared; an empty block says "probe it, or use its stored footprint".
template "train-small" {}
template "embed" {}
template "eval" {}

template "leaker" {
  # Probe only the first second: the leak starts later, as leaks do.
  probe_window = "1s"
}

job "train-small-1" {
  template = "train-small"
  command  = ["gpufrac", "simjob", "--peak", "6GiB", "--ramp", "1s", "--hold", "2s", "--seed", "1", "--result", "$GPUFRAC_RESULT"]
  result   = "results/train-small-1.json"
}

job "embed-1" {
  template = "embed"
  command  = ["gpufrac", "simjob", "--peak", "10GiB", "--ramp", "500ms", "--hold", "2s", "--seed", "2", "--result", "$GPUFRAC_RESULT"]
  result   = "results/embed-1.json"
}

job "eval-1" {
  template = "eval"
  command  = ["gpufrac", "simjob", "--peak", "16GiB", "--ramp", "1s", "--hold", "1500ms", "--seed", "3", "--result", "$GPUFRAC_RESULT"]
  result   = "results/eval-1.json"
}

job "leaker-1" {
  template = "leaker"
  command  = ["gpufrac", "simjob", "--peak", "3GiB", "--ramp", "500ms", "--hold", "2s", "--leak-to", "30GiB", "--leak-rate", "12GiB", "--seed", "4", "--result", "$GPUFRAC_RESULT"]
  result   = "results/leaker-1.json"
}

job "train-small-2" {
  template = "train-small"
  command  = ["gpufrac", "simjob", "--peak", "6GiB", "--ramp", "1s", "--hold", "2s", "--seed", "5", "--result", "$GPUFRAC_RESULT"]
  result   = "results/train-small-2.json"
}

job "embed-2" {
  template = "embed"
  command  = ["gpufrac", "simjob", "--peak", "10GiB", "--ramp", "500ms", "--hold", "2s", "--seed", "6", "--result", "$GPUFRAC_RESULT"]
  result   = "results/embed-2.json"
}

job "eval-2" {
  template = "eval"
  command  = ["gpufrac", "simjob", "--peak", "16GiB", "--ramp", "1s", "--hold", "1500ms", "--seed", "7", "--result", "$GPUFRAC_RESULT"]
  result   = "results/eval-2.json"
}

job "train-small-3" {
  template = "train-small"
  command  = ["gpufrac", "simjob", "--peak", "6GiB", "--ramp", "1s", "--hold", "2s", "--seed", "8", "--result", "$GPUFRAC_RESULT"]
  result   = "results/train-small-3.json"
}
