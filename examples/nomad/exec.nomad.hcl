# An inference server under exec: a chroot with a fresh /dev, so the task needs the NVIDIA
# device nodes, which the plugin returns when device_nodes = true (the default).
job "embedder" {
  datacenters = ["dc1"]
  type        = "service"

  group "api" {
    count = 2 # two copies; each gets its own reservation, possibly on the same GPU

    network {
      port "http" {}
    }

    task "serve" {
      driver = "exec"

      config {
        command = "/usr/local/bin/embedder"
        args    = ["--port", "${NOMAD_PORT_http}"]
      }

      resources {
        cpu    = 1000
        memory = 4096

        # 5 units = 5 GiB with the default unit. Only a GPU whose budget still has 5 free
        # units is eligible; the constraint below keeps the task off MPS GPUs.
        device "nvidia/gpumem" {
          count = 5

          constraint {
            attribute = "${device.attr.mode}"
            value     = "isolated"
          }
        }
      }
      # In mps mode the reservation also mounts the GPU's MPS pipe directory and sets
      # CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, so the cap bites at
      # allocation time. The CUDA user-space libraries must be in the chroot (exec's
      # chroot_env) or in the task's artifact.
    }
  }
}
