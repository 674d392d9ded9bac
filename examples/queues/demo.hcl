# The gpufrac demo: eight simulated jobs on one simulated 80 GiB GPU, in under 20 seconds.
#
#   make demo        (or: gpufrac run --gpu-backend auto examples/queues/demo.hcl)
#
# Every job is `gpufrac simjob`: a real process that takes simulated GPU memory the way a CUDA
# program does (a context, a ramp to its peak, a hold). On a machine with an NVIDIA GPU the
# same file would need real commands instead; see docs/run.md.
#
# It shows the three things gpufrac does, in the default mode (borrowing on). Lines marked ">"
# are lines the run prints ("..." stands for figures that vary from run to run);
# runner/demo_test.go runs this file and checks every one of them, and what is said of them here.
#
# 1. Packing by footprint. Each template declares its peak; a job's guarantee is
#    peak x 1.15 + 1.5 GB in whole GiB, and jobs start side by side while their guarantees fit
#    the 78 GiB budget (at most 4 at once here):
#      > start    eval-1               GPU0  guarantee 20GiB, may borrow up to 78GiB
#      > start    train-1              GPU0  guarantee 9GiB, may borrow up to 78GiB
#
# 2. Borrowing what nobody was promised. "grower-1" declares 4 GiB (a 6 GiB guarantee) and
#    grows to 24 GiB: past its guarantee it uses memory no other job's guarantee covers, and
#    finishes in one attempt. The summary's BORROWED column says 18GiB.
#      > ok       grower-1             GPU0  peak 24GiB in ...
#
# 3. A job stopped where it would reach a neighbour's guarantee, re-run with more room.
#    "leaker-1" declares 3 GiB (a 5 GiB guarantee) and grows towards 50 GiB while the eval jobs
#    hold their guarantees. Its allocation waits for memory to come free (borrow_wait, 1.5s here),
#    then fails inside the job; no neighbour is touched. It climbs the ladder: a guarantee of
#    the cap formula over what it reached, where it finishes:
#      > CAP      leaker-1             GPU0  out of memory inside the job at peak ...: past its 5GiB guarantee only other jobs' guarantees were left (it waited ...s in all for memory to come free), contained in ...s; neighbours untouched; next: attempt 2 of 3 with a ...GiB guarantee (...)
#      > start    leaker-1             GPU0  RE-RUN attempt 2 of 3 with a ...GiB guarantee, may borrow up to 78GiB
#      > ladder of leaker-1: 5GiB+borrow -> ...GiB+borrow: ok
#
# Then the summary table (GUARANTEE, BORROWED, LIMIT, PEAK per job), the borrower's wait, and
# report.html, which draws borrowed memory hatched apart from guaranteed memory.

# Ignore the footprints earlier demo runs stored (the leaker's raised one among them), so every
# run starts from the declared peaks.
profiles = "cold"

# How long a borrower's allocation waits for memory to come free (gpufrac run's default is 5m).
borrow_wait = "1500ms"

gpus {
  # Used when no NVIDIA GPU is found (or with --gpu-backend simulated).
  simulated = ["H100=80GiB"]
}

policy {
  headroom           = "2GiB"
  cap_margin_percent = 15
  cap_margin         = "1.5GB"
  max_tasks_per_gpu  = 4
  mode               = "isolated"
}

template "eval" {
  peak = "16GiB"
}

template "embed" {
  peak = "10GiB"
}

template "train" {
  peak = "6GiB"
}

template "grower" {
  peak = "4GiB"
}

template "leaker" {
  peak = "3GiB"
}

job "eval-1" {
  template = "eval"
  command  = ["gpufrac", "simjob", "--peak", "16GiB", "--ramp", "1s", "--hold", "8s", "--seed", "1", "--result", "$GPUFRAC_RESULT"]
  result   = "results/eval-1.json"
}

job "grower-1" {
  template = "grower"
  command  = ["gpufrac", "simjob", "--peak", "24GiB", "--ramp", "1500ms", "--hold", "1500ms", "--seed", "2", "--result", "$GPUFRAC_RESULT"]
  result   = "results/grower-1.json"
}

job "embed-1" {
  template = "embed"
  command  = ["gpufrac", "simjob", "--peak", "10GiB", "--ramp", "500ms", "--hold", "3s", "--seed", "3", "--result", "$GPUFRAC_RESULT"]
  result   = "results/embed-1.json"
}

job "train-1" {
  template = "train"
  command  = ["gpufrac", "simjob", "--peak", "6GiB", "--ramp", "1s", "--hold", "2s", "--seed", "4", "--result", "$GPUFRAC_RESULT"]
  result   = "results/train-1.json"
}

job "leaker-1" {
  template = "leaker"
  command  = ["gpufrac", "simjob", "--peak", "3GiB", "--ramp", "500ms", "--hold", "500ms", "--leak-to", "50GiB", "--leak-rate", "20GiB", "--seed", "5", "--result", "$GPUFRAC_RESULT"]
  result   = "results/leaker-1.json"
}

job "eval-2" {
  template = "eval"
  command  = ["gpufrac", "simjob", "--peak", "16GiB", "--ramp", "1s", "--hold", "8s", "--seed", "6", "--result", "$GPUFRAC_RESULT"]
  result   = "results/eval-2.json"
}

job "train-2" {
  template = "train"
  command  = ["gpufrac", "simjob", "--peak", "6GiB", "--ramp", "1s", "--hold", "2s", "--seed", "7", "--result", "$GPUFRAC_RESULT"]
  result   = "results/train-2.json"
}

job "embed-2" {
  template = "embed"
  command  = ["gpufrac", "simjob", "--peak", "10GiB", "--ramp", "500ms", "--hold", "3s", "--seed", "8", "--result", "$GPUFRAC_RESULT"]
  result   = "results/embed-2.json"
}
