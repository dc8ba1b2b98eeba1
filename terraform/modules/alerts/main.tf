# Alert policies for a Servo deployment (docs/operations.md, "Alerts").
#
# The servo.* metrics are OpenTelemetry instruments the functions send over
# OTLP to Google's Telemetry API (telemetry.googleapis.com). Cloud Monitoring
# stores them the Managed Service for Prometheus way: an instrument servo.x
# is prometheus.googleapis.com/servo.x/<counter|gauge|histogram>, on the
# monitored resource prometheus_target (one series per instance:
# service.instance.id). The 5xx ratio uses Cloud Run's own request_count.
# Each policy's documentation names the runbook section to follow.
# internal/telemetry's TestAlertPoliciesMatchTheMetrics checks every metric
# type, resource type, aligner and reducer here against what the code emits.

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

  # Either no instance exports the pass counter any more (scaled to zero)
  # or the counters exported do not grow (alive but not sweeping).
  conditions {
    display_name = "no servo.sweeper.passes series for ${var.sweeper_silence_minutes} min"
    condition_absent {
      filter   = "metric.type = \"prometheus.googleapis.com/servo.sweeper.passes/counter\" AND resource.type = \"prometheus_target\""
      duration = "${var.sweeper_silence_minutes * 60}s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  conditions {
    display_name = "servo.sweeper.passes not growing for ${var.sweeper_silence_minutes} min"
    condition_threshold {
      filter          = "metric.type = \"prometheus.googleapis.com/servo.sweeper.passes/counter\" AND resource.type = \"prometheus_target\""
      comparison      = "COMPARISON_LT"
      threshold_value = var.sweeper_min_passes
      duration        = "${var.sweeper_silence_minutes * 60}s"
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
    content   = "Transition events are not reaching Pub/Sub. Runbook: ${local.runbook}#pubsub-backlog"
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "dead_letters" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: dead-letter rate"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "servo.dead_letters above ${var.dead_letter_per_minute}/min"
    condition_threshold {
      filter          = "metric.type = \"prometheus.googleapis.com/servo.dead_letters/counter\" AND resource.type = \"prometheus_target\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.dead_letter_per_minute / 60
      duration        = "600s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    content   = "Tasks are failing for good faster than usual: a poisoned worker or a broken dependency. Runbook: ${local.runbook}#a-poisoned-worker"
    mime_type = "text/markdown"
  }
}

resource "google_monitoring_alert_policy" "errors" {
  for_each = toset(local.functions)

  project               = var.project_id
  display_name          = "${var.name_prefix}: ${each.key} 5xx ratio"
  combiner              = "OR"
  notification_channels = var.notification_channels

  conditions {
    display_name = "5xx above ${var.error_ratio * 100}% of requests"
    condition_monitoring_query_language {
      query    = <<-MQL
        fetch cloud_run_revision
        | metric 'run.googleapis.com/request_count'
        | filter resource.service_name == '${var.name_prefix}-${each.key}'
        | align rate(5m)
        | group_by [], [errors: sum(if(metric.response_code_class == '5xx', val(), 0)), all: sum(val())]
        | value [ratio: cast_double(errors) / cast_double(all)]
        | condition ratio > ${var.error_ratio}
      MQL
      duration = "300s"
    }
  }

  documentation {
    content   = "The ${each.key} function answers 5xx: 503 unavailable means Firestore or an initialisation failed. Runbook: ${local.runbook}#firestore-unavailable"
    mime_type = "text/markdown"
  }
}
