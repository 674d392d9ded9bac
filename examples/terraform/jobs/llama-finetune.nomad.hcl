# Rendered by templatefile(): ${units} and friends are filled in by Terraform; Nomad's own
# runtime variables are escaped as $${...}.
job "llama-7b-finetune" {
  namespace = "${namespace}"
  type      = "batch"

  meta {
    gpufrac_template = "${template}"
  }

  group "train" {
    task "train" {
      driver = "docker"

      config {
        image   = "ghcr.io/example/llama-finetune:1.4"
        command = "python"
        args    = ["finetune.py", "--output", "$${NOMAD_ALLOC_DIR}/data/adapter"]
      }

      resources {
        cpu    = 4000
        memory = 16384

        device "nvidia/gpumem" {
          count = ${units}
        }
      }
    }
  }
}
