# Optional alert policies (modules/alerts; docs/operations.md, "Alerts"),
# off by default: set alerts_enabled = true, and notification channels.

variable "alerts_enabled" {
  description = "Create the Cloud Monitoring alert policies of modules/alerts (sweeper lag and silence, outbox backlog age, dead-letter rate, 5xx ratio per function)."
  type        = bool
  default     = false
}

variable "alert_notification_channels" {
  description = "Notification channel ids (projects/P/notificationChannels/N) the alert policies notify."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.alert_notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "alert_notification_channels must be ids like projects/P/notificationChannels/N."
  }
}

module "alerts" {
  source = "./modules/alerts"
  count  = var.alerts_enabled ? 1 : 0

  project_id            = var.project_id
  name_prefix           = var.name_prefix
  notification_channels = var.alert_notification_channels

  depends_on = [google_project_service.apis]
}
