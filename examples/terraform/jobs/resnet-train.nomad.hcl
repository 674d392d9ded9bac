job "resnet50-train" {
  namespace = "${namespace}"
  type      = "batch"

  meta {
    gpufrac_template = "${template}"
  }

  group "train" {
    task "train" {
      driver = "docker"

      config {
        image   = "ghcr.io/example/resnet-train:2.1"
        command = "python"
        args    = ["train.py", "--amp", "--batch-size", "128"]
      }

      resources {
        cpu    = 4000
        memory = 8192

        device "nvidia/gpumem" {
          count = ${units}
        }
      }
    }
  }
}
