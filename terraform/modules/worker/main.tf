# One Servo worker: a Cloud Run service that executes tasks, the Cloud Tasks
# queues that push envelopes to it, and the service's own runtime account.
#
# A queue dispatches at most 500 tasks a second, so a worker declared faster
# (var.queue.max_dispatches_per_second) gets N = ceil(rate / 500) queues,
# each at rate / N and max_concurrent_dispatches / N: the first keeps the
# single-queue name (existing deployments keep their queue and what it
# holds), the others are <name>-q1 ... <name>-q(N-1), the names Servo
# derives from SERVO_WORKERS (package enqueue, QueueName).
#
# Ingress is open (Cloud Tasks calls from outside the VPC), but only the
# tasks-invoker account holds roles/run.invoker on the service (root
# iam.tf), so every other caller gets 403 from Cloud Run itself.

resource "google_service_account" "worker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-w-${var.name}"
  display_name = "Servo worker ${var.name}"
  description  = "Runtime identity of the ${var.name} worker service. It holds no roles; grant what the worker's own work needs."
}

resource "google_cloud_run_v2_service" "worker" {
  project             = var.project_id
  location            = var.region
  name                = "${var.name_prefix}-${var.name}"
  ingress             = "INGRESS_TRAFFIC_ALL"
  deletion_protection = var.deletion_protection

  template {
    service_account                  = google_service_account.worker.email
    timeout                          = "${var.timeout_seconds}s"
    max_instance_request_concurrency = var.concurrency

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      image = var.image

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
      }

      dynamic "env" {
        for_each = var.env
        content {
          name  = env.key
          value = env.value
        }
      }
    }
  }
}

locals {
  queue_count = ceil(var.queue.max_dispatches_per_second / 500)
  # Each queue's share of the worker's rate and of its concurrency.
  queue_rate_limits = {
    max_dispatches_per_second = var.queue.max_dispatches_per_second / local.queue_count
    max_concurrent_dispatches = floor(var.queue.max_concurrent_dispatches / local.queue_count)
  }
}

resource "google_cloud_tasks_queue" "worker" {
  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-${var.name}"

  rate_limits {
    max_dispatches_per_second = local.queue_rate_limits.max_dispatches_per_second
    max_concurrent_dispatches = local.queue_rate_limits.max_concurrent_dispatches
  }

  # Transport retries of one attempt's push. Servo's own retry policy (new
  # attempts, new tokens) is applied by the control plane, not here.
  retry_config {
    max_attempts  = var.queue.max_attempts
    min_backoff   = var.queue.min_backoff
    max_backoff   = var.queue.max_backoff
    max_doublings = var.queue.max_doublings
  }
}

# The worker's other queues, when its rate needs more than one.
resource "google_cloud_tasks_queue" "sibling" {
  count = local.queue_count - 1

  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-${var.name}-q${count.index + 1}"

  rate_limits {
    max_dispatches_per_second = local.queue_rate_limits.max_dispatches_per_second
    max_concurrent_dispatches = local.queue_rate_limits.max_concurrent_dispatches
  }

  retry_config {
    max_attempts  = var.queue.max_attempts
    min_backoff   = var.queue.min_backoff
    max_backoff   = var.queue.max_backoff
    max_doublings = var.queue.max_doublings
  }
}
