# Every setting falls back to the usual NOMAD_* environment variable.
provider "gpufrac" {
  address    = "https://nomad.example.internal:4646"
  token_file = "/etc/gpufrac/nomad-token" # or token = var.nomad_token, or NOMAD_TOKEN
  namespace  = "ml"
  ca_file    = "/etc/nomad.d/ca.pem"
  cert_file  = "/etc/nomad.d/cli.pem" # mutual TLS, with key_file
  key_file   = "/etc/nomad.d/cli-key.pem"
  # request_timeout = "30s"              # a Nomad that does not answer fails the plan after this
}
