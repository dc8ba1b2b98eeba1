# One Cloud Function (2nd gen). The source zip is the Servo Go module; the
# Go buildpack turns the package at its root into a server and
# functions-framework-go serves the function named by FUNCTION_TARGET
# (= entry_point) from the functions registered in package functions.

resource "google_cloudfunctions2_function" "this" {
  project     = var.project_id
  location    = var.region
  name        = var.name
  description = var.description

  build_config {
    runtime           = var.runtime
    entry_point       = var.entry_point
    service_account   = var.build_service_account
    docker_repository = var.docker_repository

    source {
      storage_source {
        bucket = var.source_bucket
        object = var.source_object
      }
    }
  }

  service_config {
    service_account_email            = var.service_account_email
    available_memory                 = var.memory
    available_cpu                    = var.cpu
    timeout_seconds                  = var.timeout_seconds
    min_instance_count               = var.min_instances
    max_instance_count               = var.max_instances
    max_instance_request_concurrency = var.concurrency
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    environment_variables            = var.environment

    dynamic "secret_environment_variables" {
      for_each = var.secret_environment
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value.secret
        version    = secret_environment_variables.value.version
      }
    }
  }

  dynamic "event_trigger" {
    for_each = var.pubsub_trigger == null ? [] : [var.pubsub_trigger]
    content {
      trigger_region        = var.region
      event_type            = "google.cloud.pubsub.topic.v1.messagePublished"
      pubsub_topic          = event_trigger.value.topic
      service_account_email = event_trigger.value.service_account
      # A failed sweep is not retried: the next tick sweeps again.
      retry_policy = "RETRY_POLICY_DO_NOT_RETRY"
    }
  }

  lifecycle {
    postcondition {
      condition     = var.expected_url == null || self.url == var.expected_url
      error_message = "Function ${var.name} got URL ${self.url}, but the other components were configured with ${coalesce(var.expected_url, "-")}."
    }
  }
}
