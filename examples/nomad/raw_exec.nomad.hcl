# A training script under raw_exec: no isolation, the task sees the host, and only the
# environment from the device reservation matters.
job "finetune-small" {
  datacenters = ["dc1"]
  type        = "batch"

  group "train" {
    task "train" {
      driver = "raw_exec"

      config {
        command = "/opt/jobs/.venv/bin/python"
        args    = ["/opt/jobs/finetune.py"]
      }

      resources {
        cpu    = 2000
        memory = 8192

        # One gpufrac unit is `unit_size` MiB of GPU memory (1 GiB by default). N is the
        # template's cap in units, rounded up: cap = peak x 1.15 + 1.5 GB, so a job that
        # peaked at 9 GiB gets a cap of about 11.75 GiB, i.e. count = 12.
        # `gpufrac units <template>` or the provider's units() function print N.
        # All N units always come from ONE GPU: each GPU is its own device group.
        device "nvidia/gpumem" {
          count = 12
        }
      }

      # The plugin's Reserve sets, among others:
      #   CUDA_VISIBLE_DEVICES      the GPU's UUID
      #   GPUFRAC_CAP_BYTES         the hard cap (12 GiB here); the watchdog stops the task above it
      #   GPUFRAC_MEMORY_FRACTION   the task's share of the total its CUDA calls report (1.0 under
      #                             the fence, which reports the cap; cap / GPU without it)
      #   XLA_PYTHON_CLIENT_MEM_FRACTION   0.75 of that share (JAX reads this one)
      #   GPUFRAC_RESERVATION       the secret token that ties the task's processes to the cap
    }
  }
}
