output "policy_ids" {
  description = "Ids of the alert policies created."
  value = concat(
    [
      google_monitoring_alert_policy.sweeper_lag.id,
      google_monitoring_alert_policy.sweeper_silent.id,
      google_monitoring_alert_policy.outbox_age.id,
      google_monitoring_alert_policy.dead_letters.id,
      google_monitoring_alert_policy.queued_age.id,
      google_monitoring_alert_policy.publish_failures.id,
      google_monitoring_alert_policy.errors.id,
    ],
  )
}
