terraform {
  required_version = ">= 1.8" # provider-defined functions: Terraform >= 1.8, OpenTofu >= 1.7

  required_providers {
    gpufrac = {
      source = "hashicorp/gpufrac"
    }
    nomad = {
      source  = "hashicorp/nomad"
      version = "~> 2.5"
    }
  }
}
