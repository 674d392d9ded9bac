# Nomad client agent configuration for a GPU node running the gpufrac device plugin.
# Merge this into the agent's config (for example /etc/nomad.d/client.hcl).

data_dir = "/opt/nomad/data"

# Nomad launches every executable file in plugin_dir. The plugin stanza below is matched
# against the binary's FILE NAME, so the binary must be installed as
# /opt/nomad/plugins/nomad-device-gpufrac.
plugin_dir = "/opt/nomad/plugins"

client {
  enabled = true
}

plugin "nomad-device-gpufrac" {
  config {
    # Real GPUs through NVML. Use "simulated" (with simulated_gpus) to try gpufrac on a
    # machine without a GPU.
    gpu_backend = "nvml"

    # Ledger (reservations, caps, violations) lives here and survives agent and plugin
    # restarts. Created if missing.
    state_dir = "/var/lib/gpufrac"

    # Where the headroom policy comes from: the Nomad Variable gpufrac/policy/<name>, written
    # by `terraform apply` of a gpufrac_policy resource. The token needs read and list on
    # gpufrac/*. Address and token fall back to NOMAD_ADDR and NOMAD_TOKEN.
    policy {
      address    = "https://127.0.0.1:4646"
      token_file = "/etc/gpufrac/nomad-token"
      ca_file    = "/etc/nomad.d/tls/ca.pem"
      name       = "default"
    }

    # Memory behind one Nomad device instance, for a node with no policy source. With the
    # policy block above the policy's unit_bytes sets it (so that `count = N` means the same
    # everywhere), and a unit of another size is refused.
    # unit = "1GiB"

    # Enforcement mode per GPU (index or UUID); GPUs not listed follow the policy's mode.
    gpu_modes = {
      "0" = "mps"
    }

    # Keep GPU 7 out of gpufrac (for example, reserved for a whole-GPU workload). Every entry
    # must name a GPU of the node: on a node without GPU 7 the first fingerprint fails and
    # Nomad disables the plugin, so set it only on the nodes that have one.
    # ignored_gpu_ids = ["7"]

    # A GPU that raises a critical XID takes no new task until it is reset and the plugin
    # restarts; the XIDs a task raises by faulting its own context (13, 31, 43, 45, 68, 109)
    # never mark it. List here a critical XID known to be benign on your fleet
    # (docs/gpu-backends.md, "GPU health").
    # ignored_xids = [63]

    # Re-list GPUs this often; policy and reservation changes are pushed at once anyway.
    fingerprint_period = "1m"

    # Docker tasks: setting NVIDIA_VISIBLE_DEVICES makes Nomad's docker driver use the
    # nvidia container runtime. Leave false when the node runs no docker GPU tasks.
    docker_runtime = true

    # exec tasks: hand /dev/nvidiactl, /dev/nvidia-uvm(-tools) and /dev/nvidiaN to the task.
    device_nodes = true

    # Nomad never tells a plugin that a task ended: a reservation whose token no live process
    # carries for this long is released. Keep it above your slowest image pull.
    reservation_grace = "10m"
  }
}
