# The policy the device plugin of every GPU node in namespace "ml" reads.
resource "gpufrac_policy" "training" {
  name               = "training"
  headroom           = "4GiB" # kept free on every GPU
  unit               = "1GiB" # memory behind one nvidia/gpumem instance
  cap_margin_percent = 15     # cap = peak x 1.15 + 1.5GB
  cap_margin         = "1.5GB"
  max_tasks_per_gpu  = 6
  mode               = "mps"
  watchdog_interval  = "100ms"
  unmanaged          = "report"
}
