# Alert policies (modules/alerts; docs/operations.md, "Alerts"), on by
# default: name at least one notification channel in
# alert_notification_channels (modules/alerts refuses none), or opt out
# explicitly with alerts_enabled = false.

variable "alerts_enabled" {
  description = "Create the Cloud Monitoring alert policies of modules/alerts (sweeper lag and silence, outbox backlog age, events not reaching Pub/Sub, oldest queued task per worker, dead-letter rate by reason, 5xx ratio per function); they need alert_notification_channels. false opts out (say why next to it)."
  type        = bool
  default     = true
}

variable "alert_notification_channels" {
  description = "Notification channel ids (projects/P/notificationChannels/N) the alert policies notify: at least one while alerts_enabled (gcloud beta monitoring channels create, or the console's Alerting > Edit notification channels)."
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

# The dead-letter topic's inbox (docs/operations.md, "A poisoned worker"):
# a pull subscription that keeps every dead letter for
# dead_letter_retention, so that on call can read what failed for good
# (gcloud pubsub subscriptions pull servo-dead-letter-inbox). The same
# name as servo dev's local inbox (events.DeadLetterInbox). Optional: turn
# it off when a consumer of your own subscribes to the topic.

variable "dead_letter_subscription" {
  description = "Create the pull subscription <name_prefix>-dead-letter-inbox (servo-dead-letter-inbox by default) on the dead-letter topic, which keeps dead letters for dead_letter_retention for on call to read."
  type        = bool
  default     = true
}

variable "dead_letter_retention" {
  description = "How long servo-dead-letter-inbox keeps a dead letter that nobody acknowledged (10 minutes to 7 days, in seconds with an \"s\" suffix)."
  type        = string
  default     = "604800s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.dead_letter_retention)) && try(tonumber(trimsuffix(var.dead_letter_retention, "s")) >= 600 && tonumber(trimsuffix(var.dead_letter_retention, "s")) <= 604800, false)
    error_message = "dead_letter_retention must be between \"600s\" and \"604800s\"."
  }
}

resource "google_pubsub_subscription" "dead_letter_inbox" {
  count = var.dead_letter_subscription ? 1 : 0

  project                    = var.project_id
  name                       = "${var.name_prefix}-dead-letter-inbox"
  topic                      = google_pubsub_topic.topic["dead_letter"].id
  ack_deadline_seconds       = 60
  message_retention_duration = var.dead_letter_retention
  retain_acked_messages      = false
  labels                     = { servo = "dead-letter" }

  # Never deleted for inactivity: dead letters are rare.
  expiration_policy {
    ttl = ""
  }
}

output "dead_letter_subscription" {
  description = "The dead-letter inbox subscription (null when dead_letter_subscription is false)."
  value       = var.dead_letter_subscription ? google_pubsub_subscription.dead_letter_inbox[0].id : null
}
