# Every setting falls back to the usual NOMAD_* environment variable.
provider "gpufrac" {
  address    = "https://nomad.example.internal:4646"
  token_file = "/etc/gpufrac/nomad-token" # or token = var.nomad_token, or NOMAD_TOKEN
  namespace  = "ml"
  ca_file    = "/etc/nomad.d/ca.pem"
}
