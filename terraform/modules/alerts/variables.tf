variable "project_id" {
  description = "Project the alert policies are created in (the one Servo runs in)."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of the Servo resources (the functions are <prefix>-api, <prefix>-callbacks, <prefix>-sweeper)."
  type        = string
}

variable "notification_channels" {
  description = "Monitoring notification channel ids (projects/P/notificationChannels/N) the policies notify."
  type        = list(string)
  default     = []
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
  description = "Alert when tasks are dead-lettered (servo.dead_letters) faster than this many per minute over 10 minutes."
  type        = number
  default     = 5
}

variable "error_ratio" {
  description = "Alert when more than this fraction of a function's requests answer 5xx over 5 minutes (Cloud Run's request_count)."
  type        = number
  default     = 0.05
}
