terraform {
  required_providers {
    gpufrac = { source = "hashicorp/gpufrac" }
  }
}

# 20GiB x 1.15 + 1.5GB = 24.4GiB: 25 units of 1GiB.
output "llama_units" {
  value = provider::gpufrac::units("20GiB", "1GiB", 15, "1.5GB")
}
