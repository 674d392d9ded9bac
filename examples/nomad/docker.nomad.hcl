# A PyTorch job in docker. With docker_runtime = true in the plugin config the reservation sets
# NVIDIA_VISIBLE_DEVICES, and Nomad's docker driver then runs the container with the nvidia
# runtime (it must be installed on the node).
job "bert-eval" {
  datacenters = ["dc1"]
  type        = "batch"

  group "eval" {
    task "eval" {
      driver = "docker"

      config {
        image   = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
        command = "python"
        args    = ["-c", "import os, torch; torch.cuda.set_per_process_memory_fraction(float(os.environ['GPUFRAC_MEMORY_FRACTION'])); print(torch.cuda.get_device_name())"]
      }

      resources {
        cpu    = 1000
        memory = 4096

        # 3 units of the node's unit size. The affinity prefers GPUs whose whole budget
        # (memory minus headroom and unmanaged use) is at least 40 GiB.
        device "nvidia/gpumem" {
          count = 3

          affinity {
            attribute = "${device.attr.budget}"
            operator  = ">="
            value     = "40 GiB"
            weight    = 50
          }
        }
      }
    }
  }
}
