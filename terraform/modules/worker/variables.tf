variable "project_id" {
  description = "Project of the worker."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Run service and the Cloud Tasks queue."
  type        = string
}

variable "name" {
  description = "Worker name, as callers name it in POST /v1/tasks."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of the resource names."
  type        = string
}

variable "image" {
  description = "Container image of the worker."
  type        = string
}

variable "cpu" {
  description = "CPU limit of one instance, e.g. \"1\"."
  type        = string
}

variable "memory" {
  description = "Memory limit of one instance, e.g. \"512Mi\"."
  type        = string
}

variable "timeout_seconds" {
  description = "Request timeout of the service, in seconds."
  type        = number
}

variable "concurrency" {
  description = "Requests one instance handles at once."
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

variable "env" {
  description = "Extra environment variables of the worker container."
  type        = map(string)
}

variable "queue" {
  description = "Cloud Tasks retry settings of the worker's queues, and the rates of the worker as a whole (max_dispatches_per_second, max_concurrent_dispatches), split evenly over its ceil(max_dispatches_per_second / 500) queues."
  type = object({
    max_attempts              = number
    min_backoff               = string
    max_backoff               = string
    max_doublings             = number
    max_dispatches_per_second = number
    max_concurrent_dispatches = number
  })
}

variable "deletion_protection" {
  description = "Refuse to destroy the Cloud Run service."
  type        = bool
}
