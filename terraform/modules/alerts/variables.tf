variable "project_id" {
  description = "Project the alert policies are created in (the one Servo runs in)."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of the Servo resources (the functions are <prefix>-api, <prefix>-callbacks, <prefix>-sweeper)."
  type        = string
}

variable "notification_channels" {
  description = "Monitoring notification channel ids (projects/P/notificationChannels/N) the policies notify: at least one (a policy nobody is notified of pages nobody)."
  type        = list(string)

  # The root module creates this module only when alerts_enabled is true,
  # so this is where "alerts on, no channel" is refused (a root variable's
  # validation cannot read another variable in Terraform 1.5).
  validation {
    condition     = length(var.notification_channels) > 0
    error_message = "Alerts are on (alerts_enabled = true, the default) but alert_notification_channels is empty: the policies would page nobody. Name at least one channel, alert_notification_channels = [\"projects/PROJECT/notificationChannels/ID\"]; create one with `gcloud beta monitoring channels create --display-name='Servo on call' --type=email --channel-labels=email_address=oncall@example.com` (it prints the id; `gcloud beta monitoring channels list` lists the existing ones) or in the console (Monitoring > Alerting > Edit notification channels). Or opt out explicitly: alerts_enabled = false (docs/operations.md, Alerts)."
  }
}

variable "sweeper_lag_seconds" {
  description = "Alert when the sweeper's largest lag behind a due timer in a pass (servo.sweeper.max_lag) stays above this many seconds for 5 minutes."
  type        = number
  default     = 120
}

variable "sweeper_silence_minutes" {
  description = "Alert when no sweeper pass is recorded (servo.sweeper.passes) for this many minutes."
  type        = number
  default     = 10
}

variable "sweeper_min_passes" {
  description = "Alert when fewer sweeper passes than this are counted (servo.sweeper.passes, all instances) per minute for sweeper_silence_minutes."
  type        = number
  default     = 1
}

variable "outbox_age_seconds" {
  description = "Alert when the oldest unpublished outbox entry (servo.outbox.oldest_age) stays older than this many seconds for 5 minutes."
  type        = number
  default     = 300
}

variable "dead_letter_per_minute" {
  description = "Alert when tasks are dead-lettered (servo.dead_letters) for one final reason (HEARTBEAT_TIMEOUT, DISPATCH_TIMEOUT, NON_RETRYABLE, ...) faster than this many per minute over 10 minutes."
  type        = number
  default     = 5
}

variable "queued_age_seconds" {
  description = "Alert when a worker's oldest task waiting to start (PENDING or QUEUED: servo.queued.oldest_age, max over queued_age_window_seconds) waited longer than this many seconds."
  type        = number
  default     = 900
}

variable "queued_age_window_seconds" {
  description = "The window servo.queued.oldest_age is maxed over: at least the longest start timeout of your tasks (10 minutes by default), since the sweeper looks at a waiting task at its delivery probes and start timeouts only (60 to 90000)."
  type        = number
  default     = 660

  validation {
    condition     = var.queued_age_window_seconds >= 60 && var.queued_age_window_seconds <= 90000 && floor(var.queued_age_window_seconds / 60) * 60 == var.queued_age_window_seconds
    error_message = "queued_age_window_seconds must be a whole number of minutes between 60 and 90000 (Cloud Monitoring's alignment periods)."
  }
}

variable "publish_failures_per_minute" {
  description = "Alert when transition events fail to reach Pub/Sub (servo.events.publish_failures, counted by the API and the callbacks as well as the sweeper) faster than this many per minute in every 5-minute window for 5 minutes; 0: any failure."
  type        = number
  default     = 0
}

variable "error_ratio" {
  description = "Alert when more than this fraction of a function's requests answer 5xx over 5 minutes (Cloud Run's request_count)."
  type        = number
  default     = 0.05
}
