data "gpufrac_policy" "training" {
  name = "training"
}

output "unit_bytes" {
  value = data.gpufrac_policy.training.unit_bytes
}
