# Read after the policy and template are written, so `units` reflects both.
data "gpufrac_template" "llama" {
  name       = gpufrac_template.llama_7b_finetune.name
  depends_on = [gpufrac_policy.training, gpufrac_template.llama_7b_finetune]
}

# In a jobspec: device "nvidia/gpumem" { count = data.gpufrac_template.llama.units }
output "llama_units" {
  value = data.gpufrac_template.llama.units
}
