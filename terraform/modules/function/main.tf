# One Cloud Function (2nd gen). The source zip is the Servo Go module; the
# Go buildpack turns the package at its root into a server and
# functions-framework-go serves the function named by FUNCTION_TARGET
# (= entry_point) from the functions registered in package functions.
#
# billing = "instance" deploys the same function as a Cloud Run service
# instead (google_cloud_run_v2_service, built from the same zip by its
# build_config), whose CPU is always allocated (cpu_idle = false):
# instance-based billing, which a google_cloudfunctions2_function cannot
# set. Same name (so the same IAM bindings, log filters and alert
# filters), environment, secrets, sizing; its URL is the run.app one.
# Switching replaces one resource by the other: the old one is deleted
# first (the service depends on the function, so Terraform orders the
# delete before the create both ways), since both own the Cloud Run
# service of that name.

resource "google_cloudfunctions2_function" "this" {
  count = var.billing == "request" ? 1 : 0

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

locals {
  # projects/P/locations/L/repositories/R: the built image's path.
  repository = regex("^projects/([^/]+)/locations/([^/]+)/repositories/([^/]+)$", var.docker_repository)
  image      = "${local.repository[1]}-docker.pkg.dev/${local.repository[0]}/${local.repository[2]}/${var.name}"
}

resource "google_cloud_run_v2_service" "this" {
  count = var.billing == "instance" ? 1 : 0

  project     = var.project_id
  location    = var.region
  name        = var.name
  description = var.description
  ingress     = "INGRESS_TRAFFIC_ALL"
  # Stateless and rebuilt from the source: a switch back to request-based
  # billing deletes it.
  deletion_protection = false

  # Built like the function: the Go buildpack on the runtime's base image,
  # FUNCTION_TARGET = entry_point, as the build service account.
  build_config {
    source_location = "gs://${var.source_bucket}/${var.source_object}"
    function_target = var.entry_point
    image_uri       = local.image
    base_image      = var.runtime
    service_account = var.build_service_account
  }

  template {
    service_account                  = var.service_account_email
    timeout                          = "${var.timeout_seconds}s"
    max_instance_request_concurrency = var.concurrency

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      # The build replaces it with the image built from source_location.
      image = local.image

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        # CPU always allocated: instance-based billing.
        cpu_idle = false
      }

      dynamic "env" {
        for_each = var.environment
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "env" {
        for_each = var.secret_environment
        content {
          name = env.key
          value_source {
            secret_key_ref {
              secret  = env.value.secret
              version = env.value.version
            }
          }
        }
      }
    }
  }

  traffic {
    type    = "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST"
    percent = 100
  }

  lifecycle {
    # The image is the build's (build_config): a new source object rebuilds it.
    ignore_changes = [template[0].containers[0].image, client, client_version]

    postcondition {
      condition     = var.expected_url == null || contains(self.urls, var.expected_url)
      error_message = "Service ${var.name} got URLs ${join(", ", self.urls)}, but the other components were configured with ${coalesce(var.expected_url, "-")}."
    }
  }

  # Never both at once: the function's Cloud Run service has this name.
  depends_on = [google_cloudfunctions2_function.this]
}

# Before billing existed, the function was not counted.
moved {
  from = google_cloudfunctions2_function.this
  to   = google_cloudfunctions2_function.this[0]
}
