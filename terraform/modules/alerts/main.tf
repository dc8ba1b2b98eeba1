# Alert policies for a Servo deployment (docs/operations.md, "Alerts").
#
# The servo.* metrics are OpenTelemetry instruments the functions send over
# OTLP to Google's Telemetry API (telemetry.googleapis.com). Cloud Monitoring
# stores them the Managed Service for Prometheus way: an instrument servo.x
# is prometheus.googleapis.com/servo.x/<counter|gauge|histogram>, on the
# monitored resource prometheus_target (one series per instance:
# service.instance.id). The 5xx ratio uses Cloud Run's own request_count.
# Attributes are metric labels under their own names, dots included:
# servo.worker is metric.label."servo.worker" (the Telemetry API keeps
# label keys matching [a-zA-Z_][a-zA-Z0-9_.]* as they are); a policy
# grouped by a label opens one incident per value, which its notification
# names. Each policy's documentation names the runbook section to follow.
# internal/telemetry's TestAlertPoliciesMatchTheMetrics checks every metric
# type, resource type, aligner, reducer and group-by label here against
# what the code emits.

locals {
  functions = ["api", "callbacks", "sweeper"]
  runbook   = "https://github.com/servo-dev/servo/blob/main/docs/operations.md"
}

resource "google_monitoring_alert_policy" "sweeper_lag" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: sweeper lag"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "servo.sweeper.max_lag above ${var.sweeper_lag_seconds}s"
    condition_threshold {
      filter          = "metric.type = \"prometheus.googleapis.com/servo.sweeper.max_lag/gauge\" AND resource.type = \"prometheus_target\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.sweeper_lag_seconds
      duration        = "300s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  documentation {
    content   = "The sweeper is behind its due timers (zombies, cancel timeouts, retries). Runbook: ${local.runbook}#sweeper-lag"
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "sweeper_silent" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: sweeper not running"
  combiner              = "OR"
  notification_channels = var.notification_channels

  # Either no instance exports the pass counter any more (scaled to zero:
  # the missing data counts as the condition met) or the counters exported
  # do not grow (alive but not sweeping). One condition, not an absent
  # condition beside the threshold: Cloud Monitoring bills each condition
  # ($1.50 a month, docs/cost.md).
  conditions {
    display_name = "no servo.sweeper.passes series, or fewer than ${var.sweeper_min_passes} a minute, for ${var.sweeper_silence_minutes} min"
    condition_threshold {
      filter                  = "metric.type = \"prometheus.googleapis.com/servo.sweeper.passes/counter\" AND resource.type = \"prometheus_target\""
      comparison              = "COMPARISON_LT"
      threshold_value         = var.sweeper_min_passes
      duration                = "${var.sweeper_silence_minutes * 60}s"
      evaluation_missing_data = "EVALUATION_MISSING_DATA_ACTIVE"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    content   = "No sweeper pass recorded: check the Cloud Scheduler job, the servo-sweep topic and the sweeper function. Runbook: ${local.runbook}#sweeper-lag"
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "outbox_age" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: outbox backlog"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "servo.outbox.oldest_age above ${var.outbox_age_seconds}s"
    condition_threshold {
      filter          = "metric.type = \"prometheus.googleapis.com/servo.outbox.oldest_age/gauge\" AND resource.type = \"prometheus_target\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.outbox_age_seconds
      duration        = "300s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  documentation {
    content   = "Transition events are not reaching Pub/Sub (the sweeper's outbox re-drive records this gauge: when Pub/Sub itself is down the sweeper stops too, and the publish-failures alert fires instead). Runbook, \"Pub/Sub backlog\": ${local.runbook}#pubsub-backlog"
    mime_type = "text/markdown"
  }
}

# Per final reason (servo.reason), so that the page says which:
# NON_RETRYABLE or RETRIES_EXHAUSTED is the worker's failing,
# HEARTBEAT_TIMEOUT its attempts dying, DISPATCH_TIMEOUT it never starting.
resource "google_monitoring_alert_policy" "dead_letters" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: dead-letter rate by reason"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "servo.dead_letters of one reason above ${var.dead_letter_per_minute}/min"
    condition_threshold {
      filter          = "metric.type = \"prometheus.googleapis.com/servo.dead_letters/counter\" AND resource.type = \"prometheus_target\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.dead_letter_per_minute / 60
      duration        = "600s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.\"servo.reason\""]
      }
    }
  }

  documentation {
    content   = "Tasks are failing for good faster than usual, for the reason this incident names: a poisoned worker or a broken dependency (the dead-letter inbox says which worker). Runbook, \"A poisoned worker\": ${local.runbook}#a-poisoned-worker"
    mime_type = "text/markdown"
  }
}

# servo.queued.oldest_age is recorded by the sweeper when it looks at a
# waiting task (its delivery probes, at most 30 s after its enqueue and
# then at doubling intervals, and its start timeout), not at every pass:
# its max over queued_age_window_seconds, at least the longest start
# timeout, sees every task that waits, so the condition needs no duration
# of its own. Grouped by worker: the incident names it.
resource "google_monitoring_alert_policy" "queued_age" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: oldest queued task per worker"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "servo.queued.oldest_age of a worker above ${var.queued_age_seconds}s (max over ${var.queued_age_window_seconds}s)"
    condition_threshold {
      filter          = "metric.type = \"prometheus.googleapis.com/servo.queued.oldest_age/gauge\" AND resource.type = \"prometheus_target\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.queued_age_seconds
      duration        = "0s"
      aggregations {
        alignment_period     = "${var.queued_age_window_seconds}s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
        group_by_fields      = ["metric.label.\"servo.worker\""]
      }
    }
  }

  documentation {
    content   = "A task of the worker this incident names has waited longer than ${var.queued_age_seconds}s to start: its deliveries fail (the worker is down or refuses them), its queue is paused, or a backlog. Runbook, \"A task that stays QUEUED\": ${local.runbook}#a-task-that-stays-queued"
    mime_type = "text/markdown"
  }
}

# servo.events.publish_failures is counted wherever a publish fails: the
# API and the callbacks (after their commits) keep counting when Pub/Sub
# is down and the sweeper, whose Scheduler ticks come through Pub/Sub,
# stops with it, and so stops recording servo.outbox.oldest_age. Failures
# in every 5-minute window for 5 minutes: not one blip a retry fixed.
resource "google_monitoring_alert_policy" "publish_failures" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: events not reaching Pub/Sub"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "servo.events.publish_failures above ${var.publish_failures_per_minute}/min for 5 min"
    condition_threshold {
      filter          = "metric.type = \"prometheus.googleapis.com/servo.events.publish_failures/counter\" AND resource.type = \"prometheus_target\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.publish_failures_per_minute / 60
      duration        = "300s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.\"servo.cause\""]
      }
    }
  }

  documentation {
    content   = "Transition events stay in the outbox: publishing to Pub/Sub fails with the cause this incident names (NotFound: a topic is gone; PermissionDenied; Unavailable or DeadlineExceeded: Pub/Sub itself, and then the sweeper is down too). Runbook, \"Pub/Sub backlog\": ${local.runbook}#pubsub-backlog"
    mime_type = "text/markdown"
  }
}

# One condition for the three functions, grouped by service: an incident
# per function that answers 5xx, for the price of one condition ($1.50 a
# month) instead of three.
resource "google_monitoring_alert_policy" "errors" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: 5xx ratio per function"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "5xx above ${var.error_ratio * 100}% of a function's requests"
    condition_monitoring_query_language {
      query    = <<-MQL
        fetch cloud_run_revision
        | metric 'run.googleapis.com/request_count'
        | filter resource.service_name =~ '${var.name_prefix}-(${join("|", local.functions)})'
        | align rate(5m)
        | group_by [resource.service_name], [errors: sum(if(metric.response_code_class == '5xx', val(), 0)), all: sum(val())]
        | value [ratio: cast_double(errors) / cast_double(all)]
        | condition ratio > ${var.error_ratio}
      MQL
      duration = "300s"
    }
  }

  documentation {
    content   = "The function this incident names (its Cloud Run service, resource.service_name) answers 5xx. Its error code says which runbook section: 503 unavailable (Firestore or another dependency): ${local.runbook}#firestore-unavailable; 503 misconfigured or secret_unavailable (it cannot start): ${local.runbook}#a-configuration-or-secret-error"
    mime_type = "text/markdown"
  }
}
