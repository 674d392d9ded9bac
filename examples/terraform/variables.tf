variable "nomad_addr" {
  description = "Nomad HTTP API address."
  type        = string
  default     = "http://127.0.0.1:4646"
}

variable "nomad_token" {
  description = "Nomad ACL token with read, list, write and destroy on variables path gpufrac/* (and job submission for nomad_job)."
  type        = string
  sensitive   = true
  default     = null
}

variable "namespace" {
  description = "Nomad namespace of the policy, the templates and the jobs."
  type        = string
  default     = "default"
}
