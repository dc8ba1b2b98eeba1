variable "project_id" {
  description = "Project of the function."
  type        = string
}

variable "region" {
  description = "Region of the function (and of its Pub/Sub trigger)."
  type        = string
}

variable "name" {
  description = "Function name; kebab-case, so the Cloud Run service gets the same name."
  type        = string
}

variable "description" {
  description = "What the function does."
  type        = string
}

variable "entry_point" {
  description = "Function name registered with functions-framework-go (FUNCTION_TARGET)."
  type        = string
}

variable "runtime" {
  description = "Go runtime ID, e.g. go126."
  type        = string
}

variable "source_bucket" {
  description = "Bucket holding the source zip."
  type        = string
}

variable "source_object" {
  description = "Object name of the source zip."
  type        = string
}

variable "build_service_account" {
  description = "Service account Cloud Build builds the function as (projects/P/serviceAccounts/EMAIL)."
  type        = string
}

variable "docker_repository" {
  description = "Artifact Registry repository the built image is stored in (projects/P/locations/L/repositories/R)."
  type        = string
}

variable "service_account_email" {
  description = "Runtime service account of the function."
  type        = string
}

variable "environment" {
  description = "Plain environment variables."
  type        = map(string)
}

variable "secret_environment" {
  description = "Environment variables mounted from Secret Manager: name => {secret (short ID), version (number)}."
  type = map(object({
    secret  = string
    version = string
  }))
}

variable "memory" {
  description = "Memory of one instance, e.g. \"512Mi\"."
  type        = string
}

variable "cpu" {
  description = "CPUs of one instance, e.g. \"1\"."
  type        = string
}

variable "timeout_seconds" {
  description = "Execution timeout in seconds."
  type        = number
}

variable "min_instances" {
  description = "Minimum number of instances."
  type        = number
}

variable "max_instances" {
  description = "Maximum number of instances."
  type        = number
}

variable "concurrency" {
  description = "Requests one instance handles at once."
  type        = number
}

variable "pubsub_trigger" {
  description = "Null for an HTTP function; for a CloudEvent function triggered by a Pub/Sub topic: the topic ID (projects/P/topics/T) and the account the trigger pushes as."
  type = object({
    topic           = string
    service_account = string
  })
  default = null
}

variable "expected_url" {
  description = "When set, the URL the function must get (checked after apply); used for the callbacks URL other components are configured with before the function exists."
  type        = string
  default     = null
}

variable "billing" {
  description = "Cloud Run billing: \"request\" (a Cloud Function, request-based) or \"instance\" (a Cloud Run service built from the same source, CPU always allocated: instance-based)."
  type        = string
  default     = "request"

  validation {
    condition     = contains(["request", "instance"], var.billing)
    error_message = "billing must be \"request\" or \"instance\"."
  }
}
