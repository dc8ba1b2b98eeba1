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

variable "managed_externally" {
  description = "Leave the ring to `servo keys --secret`: create the secret, write no version (ids and active are ignored)."
  type        = bool
  default     = false
}

variable "allow_early_drop" {
  description = "Let a plan drop a key within the longest token lifetime of its deactivation (a compromised key)."
  type        = bool
  default     = false
}
