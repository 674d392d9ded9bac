resource "gpufrac_template" "llama_7b_finetune" {
  name          = "llama-7b-finetune"
  policy        = gpufrac_policy.training.name   # written after the policy
  policy_sizing = gpufrac_policy.training.sizing # units right in the plan that changes the policy
  peak          = "20GiB"                        # measured with `gpufrac probe`
  description   = "LoRA fine-tune of a 7B model, batch 8"
}

# A job whose footprint is known better than any measurement: the cap is given outright.
resource "gpufrac_template" "embedding_server" {
  name         = "embedding-server"
  policy       = gpufrac_policy.training.name
  cap_override = "6GiB"
}
