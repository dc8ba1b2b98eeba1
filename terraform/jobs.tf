# Job workers: Cloud Run Jobs as a dispatch target (package jobs).
#
# A job worker's attempts run as executions of a Cloud Run Job, one per
# attempt, for tasks longer than a Cloud Tasks HTTP request may last (30
# min). Its Cloud Tasks queue delivers each attempt's envelope to the
# ServoJobs function (the dispatch endpoint), which runs the job with the
# envelope as a per-execution environment override and records the
# execution on the attempt. The sweeper and the callbacks cancel an
# execution whose attempt a timer ended.
#
# Least privilege, on each job only (grants in iam.tf, target "jobs"):
#   jobs       custom role servoJobDispatcher: run.jobs.run,
#              run.jobs.runWithOverrides, run.executions.get,
#              run.executions.list, run.executions.cancel. A custom role
#              rather than roles/run.developer, which could also update and
#              delete the job.
#   sweeper    custom role servoJobCanceller: run.executions.cancel, for
#   callbacks  the executions of attempts whose lease or cancel grace ran out.
#   tasks-invoker  roles/run.invoker on the ServoJobs function only.
# The job's own runtime account holds no roles.

variable "jobs" {
  description = <<-EOT
    Job workers by name (names share SERVO_WORKERS with var.workers and must
    differ from them): each gets a Cloud Run Job (its own runtime service
    account; no Cloud Run retries: Servo's retries are new attempts, new
    executions) and a Cloud Tasks queue that calls the ServoJobs function.
    The container runs one attempt from $SERVO_ENVELOPE and exits
    (worker.RunJob; the example worker with "-job"). The image is image, or
    the image of the push worker named by worker (so worker_images applies:
    the example worker's image runs as a job with args ["-job"]).
    task_timeout bounds one execution ("86400s" at most).
  EOT
  type = map(object({
    image        = optional(string)
    worker       = optional(string)
    args         = optional(list(string), ["-job"])
    cpu          = optional(string, "1")
    memory       = optional(string, "512Mi")
    task_timeout = optional(string, "86400s")
    env          = optional(map(string), {})
    queue = optional(object({
      max_attempts              = optional(number, 10)
      min_backoff               = optional(string, "1s")
      max_backoff               = optional(string, "300s")
      max_doublings             = optional(number, 5)
      max_dispatches_per_second = optional(number, 5)
      max_concurrent_dispatches = optional(number, 20)
    }), {})
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.jobs) : can(regex("^[a-z][a-z0-9-]{0,13}[a-z0-9]$", name))])
    error_message = "Job worker names must be 2-15 lowercase letters, digits and hyphens, starting with a letter (they become service account, job and queue names)."
  }
  validation {
    condition = alltrue([for j in values(var.jobs) :
      (j.image == null) != (j.worker == null) && (j.image == null || try(length(j.image) > 0, false)) &&
      can(regex("^[0-9]+(Mi|Gi|M|G)$", j.memory)) &&
      can(regex("^([0-9]+(\\.[0-9]+)?|[0-9]+m)$", j.cpu)) &&
      can(regex("^[0-9]+s$", j.task_timeout)) &&
      try(tonumber(trimsuffix(j.task_timeout, "s")) >= 1 && tonumber(trimsuffix(j.task_timeout, "s")) <= 86400, false) &&
      alltrue([for k in keys(j.env) : can(regex("^[A-Za-z_][A-Za-z0-9_]*$", k) && !startswith(k, "SERVO_"))])
    ])
    error_message = "Each job needs either an image or the worker whose image it runs; memory like \"512Mi\"; cpu like \"1\"; task_timeout \"1s\" to \"86400s\"; env names like FOO_BAR, none starting SERVO_ (Servo sets those per execution)."
  }
  validation {
    condition = alltrue([for j in values(var.jobs) :
      j.queue.max_attempts >= -1 && j.queue.max_doublings >= 0 &&
      j.queue.max_dispatches_per_second > 0 && j.queue.max_concurrent_dispatches >= 1 &&
      can(regex("^[0-9]+(\\.[0-9]+)?s$", j.queue.min_backoff)) && can(regex("^[0-9]+(\\.[0-9]+)?s$", j.queue.max_backoff))
    ])
    error_message = "Each job's queue: max_attempts >= -1 (-1: unlimited), max_doublings >= 0, max_dispatches_per_second > 0, max_concurrent_dispatches >= 1, backoffs like \"1s\"."
  }
}

locals {
  # ServoJobs' URL is deterministic for 2nd gen functions, like the
  # callbacks': every function's environment names it.
  jobs_function_name = "${var.name_prefix}-jobs"
  jobs_function_url  = "https://${var.region}-${var.project_id}.cloudfunctions.net/${local.jobs_function_name}"

  # The container of every job, named in the per-execution overrides
  # (SERVO_JOBS_CONTAINER).
  job_container = "worker"

  job_images = { for name, j in var.jobs : name => j.image != null ? j.image : lookup(local.worker_images, j.worker, "") }

  # The push workers' extra queues' names (modules/worker), which job
  # queues must not take.
  worker_queue_names = flatten([for name, w in var.workers :
    [for i in range(1, ceil(w.queue.max_dispatches_per_second / 500)) : "${var.name_prefix}-${name}-q${i}"]
  ])

  # The job workers' entries of SERVO_WORKERS (package enqueue).
  servo_job_workers = {
    for name, j in google_cloud_run_v2_job.job : name => {
      job            = j.id
      queue          = google_cloud_tasks_queue.job[name].id
      serviceAccount = google_service_account.component["tasks-invoker"].email
      # Cloud Tasks calls the jobs dispatch function: its timeout bounds
      # the dispatch deadline.
      timeoutSeconds = var.functions.jobs.timeout_seconds
    }
  }
}

# The two custom roles of the job grants (iam.tf names them
# "custom:servoJobDispatcher" and "custom:servoJobCanceller").
resource "google_project_iam_custom_role" "job" {
  for_each = {
    servoJobDispatcher = {
      title       = "Servo job dispatcher"
      description = "Runs a Servo job worker's Cloud Run Job with per-execution overrides, finds and cancels its executions."
      permissions = ["run.jobs.run", "run.jobs.runWithOverrides", "run.executions.get", "run.executions.list", "run.executions.cancel"]
    }
    servoJobCanceller = {
      title       = "Servo job canceller"
      description = "Cancels the executions of a Servo job worker's Cloud Run Job."
      permissions = ["run.executions.cancel"]
    }
    # Not a job's: the control API's event stream (GET /v1/events) reads
    # the events topic through a temporary subscription of its own.
    servoEventStreamer = {
      title       = "Servo event streamer"
      description = "Creates, reads and deletes the temporary subscriptions of the Servo control API's event stream."
      permissions = ["pubsub.subscriptions.create", "pubsub.subscriptions.get", "pubsub.subscriptions.consume", "pubsub.subscriptions.delete"]
    }
    # The sweeper deletes the subscriptions of streams whose instance died
    # mid-stream (it lists them on the events topic: roles/pubsub.viewer
    # there).
    servoStreamCleaner = {
      title       = "Servo stream cleaner"
      description = "Deletes the leftover temporary subscriptions of the Servo control API's event stream."
      permissions = ["pubsub.subscriptions.delete"]
    }
  }

  project     = var.project_id
  role_id     = "${replace(var.name_prefix, "-", "_")}_${each.key}"
  title       = each.value.title
  description = each.value.description
  permissions = each.value.permissions

  # Created through iam.googleapis.com: after the API's enable wait.
  depends_on = [google_project_service.apis]
}

resource "google_service_account" "job" {
  for_each = var.jobs

  project      = var.project_id
  account_id   = "${var.name_prefix}-j-${each.key}"
  display_name = "Servo job worker ${each.key}"
  description  = "Runtime identity of the ${each.key} job worker. It holds no roles; grant what the job's own work needs."

  depends_on = [google_project_service.apis]
}

resource "google_cloud_run_v2_job" "job" {
  for_each = var.jobs

  project             = var.project_id
  location            = var.region
  name                = "${var.name_prefix}-${each.key}"
  deletion_protection = var.deletion_protection

  template {
    task_count  = 1
    parallelism = 1

    template {
      service_account = google_service_account.job[each.key].email
      timeout         = each.value.task_timeout
      # Servo decides retries (new attempts, new executions); the worker
      # exits 0 once its attempt is settled.
      max_retries = 0

      containers {
        name  = local.job_container
        image = local.job_images[each.key]
        args  = each.value.args

        resources {
          limits = {
            cpu    = each.value.cpu
            memory = each.value.memory
          }
        }

        dynamic "env" {
          for_each = each.value.env
          content {
            name  = env.key
            value = env.value
          }
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = !contains(keys(var.workers), each.key)
      error_message = "Job worker ${each.key} has the name of a push worker in var.workers: names share SERVO_WORKERS."
    }
    precondition {
      condition     = !contains(local.worker_queue_names, "${var.name_prefix}-${each.key}")
      error_message = "Job worker ${each.key}: its queue ${var.name_prefix}-${each.key} is the name of a push worker's extra queue (var.workers, <name>-q1, ...): rename it."
    }
    precondition {
      condition     = each.value.worker == null || contains(keys(var.workers), coalesce(each.value.worker, "-"))
      error_message = "Job worker ${each.key}: worker names no push worker in var.workers."
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_cloud_tasks_queue" "job" {
  for_each = var.jobs

  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-${each.key}"

  rate_limits {
    max_dispatches_per_second = each.value.queue.max_dispatches_per_second
    max_concurrent_dispatches = each.value.queue.max_concurrent_dispatches
  }

  # Transport retries of one dispatch (ServoJobs answers 503 while the
  # Admin API or Firestore is unavailable); a repeated dispatch finds the
  # attempt's execution and starts none.
  retry_config {
    max_attempts  = each.value.queue.max_attempts
    min_backoff   = each.value.queue.min_backoff
    max_backoff   = each.value.queue.max_backoff
    max_doublings = each.value.queue.max_doublings
  }

  depends_on = [google_project_service.apis]
}
