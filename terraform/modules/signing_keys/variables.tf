variable "project_id" {
  description = "Project of the secret."
  type        = string
}

variable "secret_id" {
  description = "Secret Manager secret ID of the key ring."
  type        = string
}

variable "ids" {
  description = "Key IDs (kid) in the ring; each gets 32 random bytes, generated once."
  type        = list(string)
}

variable "active" {
  description = "The kid that signs new tokens; one of ids."
  type        = string
}

variable "deletion_protection" {
  description = "Refuse to destroy the secret."
  type        = bool
}
