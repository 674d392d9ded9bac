provider "nomad" {
  address   = var.nomad_addr
  secret_id = var.nomad_token
}

# The job asks for as many memory units as its template says; Nomad places all of them on one
# GPU (one device group per GPU) and the plugin caps the task at units x unit.
resource "nomad_job" "llama_finetune" {
  jobspec = templatefile("${path.module}/jobs/llama-finetune.nomad.hcl", {
    namespace = var.namespace
    template  = data.gpufrac_template.llama_finetune.name
    units     = data.gpufrac_template.llama_finetune.units
  })
}

resource "nomad_job" "resnet_train" {
  jobspec = templatefile("${path.module}/jobs/resnet-train.nomad.hcl", {
    namespace = var.namespace
    template  = data.gpufrac_template.resnet_train.name
    units     = data.gpufrac_template.resnet_train.units
  })
}
