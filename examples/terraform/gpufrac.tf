provider "gpufrac" {
  address   = var.nomad_addr
  token     = var.nomad_token
  namespace = var.namespace
}

# The GPU-sharing policy. The device plugin on every GPU node reads it (plugin config:
# policy = "training") and re-fingerprints when it changes.
resource "gpufrac_policy" "training" {
  name               = "training"
  headroom           = "4GiB" # kept free on every GPU for drivers and CUDA contexts
  unit               = "1GiB" # memory behind one nvidia/gpumem device instance
  cap_margin_percent = 15     # cap = peak x 1.15 + 1.5GB
  cap_margin         = "1.5GB"
  max_tasks_per_gpu  = 6
  mode               = "isolated" # or "mps" where the MPS daemon runs
  watchdog_interval  = "100ms"
  unmanaged          = "report"
}

# Job templates: measured peaks (gpufrac probe) turned into caps and unit counts.
# policy_sizing makes each template's units follow a policy change in the same plan.
resource "gpufrac_template" "llama_finetune" {
  name          = "llama-7b-finetune"
  policy        = gpufrac_policy.training.name
  policy_sizing = gpufrac_policy.training.sizing
  peak          = "20GiB"
  description   = "LoRA fine-tune of a 7B model, batch 8"
}

resource "gpufrac_template" "resnet_train" {
  name          = "resnet50-train"
  policy        = gpufrac_policy.training.name
  policy_sizing = gpufrac_policy.training.sizing
  peak          = "7.5GiB"
  description   = "ResNet-50 training, batch 128, AMP"
}

resource "gpufrac_template" "embedding_server" {
  name          = "embedding-server"
  policy        = gpufrac_policy.training.name
  policy_sizing = gpufrac_policy.training.sizing
  cap_override  = "6GiB" # a known bound, no margin added
  description   = "Sentence-embedding inference server"
}

# Read back after the policy and templates are written, so the unit counts always match what
# the device plugin will enforce, even in an apply that changes the policy.
data "gpufrac_template" "llama_finetune" {
  name       = gpufrac_template.llama_finetune.name
  depends_on = [gpufrac_policy.training, gpufrac_template.llama_finetune]
}

data "gpufrac_template" "resnet_train" {
  name       = gpufrac_template.resnet_train.name
  depends_on = [gpufrac_policy.training, gpufrac_template.resnet_train]
}

output "units" {
  description = "nvidia/gpumem instances each kind of job requests."
  value = {
    llama_finetune   = data.gpufrac_template.llama_finetune.units
    resnet_train     = data.gpufrac_template.resnet_train.units
    embedding_server = gpufrac_template.embedding_server.units
    # The same formula from configuration values alone, no read of Nomad.
    llama_by_function = provider::gpufrac::units(
      gpufrac_template.llama_finetune.peak,
      gpufrac_policy.training.unit,
      gpufrac_policy.training.cap_margin_percent,
      gpufrac_policy.training.cap_margin,
    )
  }
}

output "caps" {
  description = "Hard memory caps per kind of job."
  value = {
    llama_finetune = data.gpufrac_template.llama_finetune.cap
    resnet_train   = data.gpufrac_template.resnet_train.cap
  }
}
