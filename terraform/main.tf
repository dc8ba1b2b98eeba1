# Servo on Google Cloud: the root module wires the components together.
#
#   modules/firestore     the database, its composite indexes and TTL policies
#   modules/signing_keys  the Secret Manager secret with the token key ring
#   modules/worker        one Cloud Run worker service + Cloud Tasks queue(s) + runtime account
#   modules/function      one Cloud Function (2nd gen) built from the zipped source,
#                         or a Cloud Run service built from it (instance-based billing)
#
# Service accounts and every IAM grant live in iam.tf, in one table.

locals {
  source_dir = coalesce(var.function_source_dir, "${path.module}/..")

  # The callbacks function's URL is deterministic for 2nd gen functions, which
  # lets the callbacks function (which re-enqueues retries) carry its own URL
  # without a dependency cycle. A postcondition in the function module checks
  # it against the URL Google reports.
  callbacks_name = "${var.name_prefix}-callbacks"
  # Billed by instance, the callbacks are a Cloud Run service, whose
  # deterministic URL is the run.app one (modules/function).
  callbacks_url = local.functions_billing.callbacks == "instance" ? "https://${local.callbacks_name}-${local.project_number}.${var.region}.run.app" : "https://${var.region}-${var.project_id}.cloudfunctions.net/${local.callbacks_name}"

  # Known from the variables alone, for the due_shards check (the check's
  # data source must not depend on any managed resource).
  sweeper_name = "${var.name_prefix}-sweeper"

  # The API's ID-token audiences (SERVO_API_AUDIENCE): callers mint tokens
  # for the URL they call, the function's (control_api_url) or its Cloud
  # Run service's deterministic one. Without them the API accepts no Google
  # ID token (a Google ID token minted for any other audience is signed by
  # the same keys), and servo doctor fails its identity row.
  api_name = "${var.name_prefix}-api"
  api_audiences = [
    "https://${var.region}-${var.project_id}.cloudfunctions.net/${local.api_name}",
    "https://${local.api_name}-${local.project_number}.${var.region}.run.app",
  ]

  # Every name is derived from name_prefix unless set explicitly; with the
  # default prefix "servo" these are the names earlier versions used.
  topics = {
    events      = coalesce(var.events_topic, "${var.name_prefix}-task-events")
    dead_letter = coalesce(var.dead_letter_topic, "${var.name_prefix}-dead-letter")
    sweep       = coalesce(var.sweep_topic, "${var.name_prefix}-sweep")
  }
  artifact_repository = coalesce(var.artifact_repository, var.name_prefix)

  # The environment's Firestore database, as IAM conditions name it.
  database_name = "projects/${var.project_id}/databases/${var.firestore_database}"

  worker_images = { for name, w in var.workers : name => lookup(var.worker_images, name, w.image) }

  # SERVO_WORKERS: where each named worker's tasks go (package enqueue).
  servo_workers = merge({
    for name, w in module.worker : name => {
      url            = w.url
      queue          = w.queue_id
      serviceAccount = google_service_account.component["tasks-invoker"].email
      # A Cloud Task's dispatch deadline never exceeds the service's
      # request timeout (package enqueue, DispatchDeadline).
      timeoutSeconds = var.workers[name].timeout_seconds
      # The declared peak rate: above 500 dispatches a second the worker
      # has several queues, queue's name with -q1, -q2, ... (modules/worker).
      maxDispatchesPerSecond = var.workers[name].queue.max_dispatches_per_second
    }
  }, local.servo_pull_pools, local.servo_job_workers)

  # The environment every function reads (package functions). The signing
  # key ring is mounted from Secret Manager (version "latest") as
  # SERVO_TOKEN_KEYS, and SERVO_TOKEN_KEYS_SECRET names the secret so that
  # running instances re-read the ring and pick up a rotation without a
  # new revision (package auth).
  function_env = {
    SERVO_PROJECT            = var.project_id
    SERVO_FIRESTORE_DATABASE = var.firestore_database
    SERVO_NAME_PREFIX        = var.name_prefix
    SERVO_CALLBACK_BASE_URL  = local.callbacks_url
    SERVO_WORKERS            = jsonencode(local.servo_workers)
    SERVO_TOKEN_KEYS_SECRET  = "projects/${var.project_id}/secrets/${module.signing_keys.secret_id}"
    SERVO_EVENTS_TOPIC       = local.topics.events
    SERVO_DEAD_LETTER_TOPIC  = local.topics.dead_letter
    SERVO_SWEEP_EVERY        = var.sweep_every
    SERVO_SWEEP_EARLY_END    = tostring(var.sweep_early_end)
    SERVO_TRACE_SAMPLE_RATIO = tostring(var.trace_sample_ratio)
    SERVO_TRACE_SLOW         = var.trace_slow
    SERVO_LOG_HEARTBEATS     = tostring(var.log_heartbeats)
    SERVO_LOG_STARTED        = tostring(var.log_started)
    SERVO_START_TIMEOUT      = var.start_timeout
    SERVO_DUE_SHARDS         = tostring(var.due_shards)
    SERVO_RETENTION_DAYS     = tostring(var.retention_days)
    # store.RunDocumentEveryFor: each api process writes a busy run's
    # document once an interval, 2 s a process (at least a minute).
    SERVO_RUN_DOCUMENT_EVERY = "${max(60, 2 * local.function_max_instances.api)}s"
    SERVO_CLAIM_AUDIENCE     = local.claim_url
    SERVO_JOBS_DISPATCH_URL  = local.jobs_function_url
    SERVO_JOBS_CONTAINER     = local.job_container
    SERVO_ACCESS             = local.servo_access
    SERVO_QUOTAS             = local.servo_quotas
    SERVO_IAP_AUDIENCE       = var.iap_audience
    SERVO_API_AUDIENCE       = join(",", local.api_audiences)
  }

  # Billing of the api and the callbacks (functions_billing; README.md,
  # "Billing"). billing_break_even is, by function, the declared rate
  # (lifecycles a second) from which instance-based billing costs no more
  # than request-based at every higher rate: computed by `go run
  # ./bench/cost` from the recorded traffic (docs/cost.md, "Billing"), kept
  # equal to the program's figure by internal/cost's
  # TestTerraformBreakEven. "auto" bills each function the cheaper way at
  # expected_lifecycles_per_second.
  billing_break_even = {
    api       = 9.4
    callbacks = 3.1
  }
  functions_billing = {
    for name, rate in local.billing_break_even : name => (
      var.functions_billing != "auto" ? var.functions_billing : (var.expected_lifecycles_per_second >= rate ? "instance" : "request")
    )
  }

  # max_instances of the api and the callbacks, unless functions sets it:
  # twice the instances the declared rate needs (bursts to twice it), never
  # below the former defaults (api 20, callbacks 50) nor min_instances.
  # instances_per_lifecycle_rate is, by function, the instances needed per
  # lifecycle a second once busy (CPU and concurrency at the autoscaler's
  # 60 %, the shape with 10 heartbeats), computed by `go run ./bench/cost`
  # and kept equal by TestTerraformBreakEven; at 1 000 a second the
  # callbacks need 50, so get 100.
  instances_per_lifecycle_rate = {
    api       = 0.0061
    callbacks = 0.05
  }
  max_instances_floor = {
    api       = 20
    callbacks = 50
  }
  function_max_instances = {
    for name, per in local.instances_per_lifecycle_rate : name => coalesce(
      var.functions[name].max_instances,
      max(local.max_instances_floor[name], var.functions[name].min_instances, ceil(2 * var.expected_lifecycles_per_second * per)),
    )
  }

  # The entry points registered with functions-framework-go in package
  # github.com/servo-dev/servo/functions; all are built from the same zip.
  functions = {
    api = {
      name        = local.api_name
      entry_point = "ServoAPI"
      description = "Servo control API: submit, get, list and cancel tasks (IAM-protected)."
      sizing      = var.functions.api
      pubsub      = null
    }
    callbacks = {
      name        = local.callbacks_name
      entry_point = "ServoCallbacks"
      description = "Servo worker callbacks: started, heartbeat, completed (public; the task token authenticates)."
      sizing      = var.functions.callbacks
      pubsub      = null
    }
    sweeper = {
      name        = local.sweeper_name
      entry_point = "ServoSweeper"
      description = "Servo sweeper: zombies, cancel timeouts, stuck dispatches, deadlines, due retries."
      sizing      = var.functions.sweeper
      pubsub = {
        topic           = google_pubsub_topic.topic["sweep"].id
        service_account = google_service_account.component["sweep-trigger"].email
      }
    }
    claim = {
      name        = local.claim_name
      entry_point = "ServoClaim"
      description = "Servo pull-pool claims (invocable only by the pools' service accounts)."
      sizing      = var.claim_function
      pubsub      = null
    }
    jobs = {
      name        = local.jobs_function_name
      entry_point = "ServoJobs"
      description = "Servo jobs dispatch: runs job workers' Cloud Run Jobs, one execution per attempt (IAM-protected; Cloud Tasks calls it)."
      sizing      = var.functions.jobs
      pubsub      = null
    }
  }
}

# --- APIs ------------------------------------------------------------------

resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtasks.googleapis.com",
    "cloudtrace.googleapis.com",
    "eventarc.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
    # The functions' spans reach Cloud Trace over OTLP through the
    # Telemetry API (package telemetry).
    "telemetry.googleapis.com",
  ])

  project = var.project_id
  service = each.value
  # Leave APIs on at teardown: other things in the project may use them.
  disable_on_destroy = false

  # An API just enabled is not usable everywhere at once: its first calls
  # can still fail SERVICE_DISABLED ("If you enabled this API recently,
  # wait a few minutes for the action to propagate"). Each API, once
  # enabled, waits api_enable_wait_seconds before Terraform counts it
  # created, so that everything that depends on google_project_service.apis
  # (every resource that calls one of them, in every file) starts after the
  # wait. A creation-time provisioner runs once, when the API is added to
  # this list: an apply that enables nothing new does not wait. (No time
  # provider: the module needs only google, archive and random. sleep is in
  # the hashicorp/terraform image's BusyBox, Linux and macOS.)
  provisioner "local-exec" {
    command = "sleep ${var.api_enable_wait_seconds}"
  }
}

# --- Service accounts (roles: iam.tf) ----------------------------------------

resource "google_service_account" "component" {
  for_each = local.service_accounts

  project      = var.project_id
  account_id   = "${var.name_prefix}-${each.key}"
  display_name = "Servo ${each.key}"
  description  = each.value

  depends_on = [google_project_service.apis]
}

# --- State -------------------------------------------------------------------

module "firestore" {
  source = "./modules/firestore"

  project_id          = var.project_id
  location            = var.firestore_location
  database            = var.firestore_database
  deletion_protection = var.deletion_protection

  depends_on = [google_project_service.apis]
}

# --- Events ------------------------------------------------------------------

resource "google_pubsub_topic" "topic" {
  for_each = local.topics

  project = var.project_id
  name    = each.value
  # Events and dead letters are kept (a day by default) even before anyone
  # subscribes; sweep ticks are worthless a minute later.
  message_retention_duration = each.key == "sweep" ? null : var.topic_message_retention

  depends_on = [google_project_service.apis]
}

# Cloud Scheduler publishes one tick a minute to the sweep topic. It calls
# the Pub/Sub publish API as the scheduler service account (an OAuth token),
# rather than using a pubsub_target, which always publishes as Cloud
# Scheduler's own service agent: this way the only identity that can publish
# ticks is one that holds roles/pubsub.publisher on this one topic.
resource "google_cloud_scheduler_job" "sweep" {
  project          = var.project_id
  region           = var.region
  name             = "${var.name_prefix}-sweep"
  description      = "Publishes a sweep tick to ${local.topics.sweep}; the tick triggers the Servo sweeper."
  schedule         = var.sweep_schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = "30s"

  retry_config {
    # A missed tick is covered by the next one.
    retry_count = 0
  }

  http_target {
    http_method = "POST"
    uri         = "https://pubsub.googleapis.com/v1/${google_pubsub_topic.topic["sweep"].id}:publish"
    headers = {
      "Content-Type" = "application/json"
    }
    # The sweeper ignores the message content: every message is a tick.
    body = base64encode(jsonencode({
      messages = [{
        data       = base64encode("{}")
        attributes = { source = "${var.name_prefix}-sweep" }
      }]
    }))

    oauth_token {
      service_account_email = google_service_account.component["scheduler"].email
      scope                 = "https://www.googleapis.com/auth/pubsub"
    }
  }

  depends_on = [google_pubsub_topic_iam_member.grant]
}

# --- Token signing keys ------------------------------------------------------

module "signing_keys" {
  source = "./modules/signing_keys"

  project_id          = var.project_id
  secret_id           = "${var.name_prefix}-token-keys"
  active              = var.signing_keys.active
  ids                 = var.signing_keys.ids
  managed_externally  = var.signing_keys.managed_externally
  allow_early_drop    = var.signing_keys.allow_early_drop
  deletion_protection = var.deletion_protection

  depends_on = [google_project_service.apis]
}

# --- Images ------------------------------------------------------------------

resource "google_artifact_registry_repository" "images" {
  project       = var.project_id
  location      = var.region
  repository_id = local.artifact_repository
  format        = "DOCKER"
  description   = "Servo worker images and the images Cloud Build makes of the functions."

  cleanup_policies {
    id     = "delete-untagged-after-30d"
    action = "DELETE"
    condition {
      tag_state  = "UNTAGGED"
      older_than = "2592000s"
    }
  }

  depends_on = [google_project_service.apis]
}

# --- Workers and their queues ------------------------------------------------

module "worker" {
  source   = "./modules/worker"
  for_each = var.workers

  project_id      = var.project_id
  region          = var.region
  name            = each.key
  name_prefix     = var.name_prefix
  image           = local.worker_images[each.key]
  cpu             = each.value.cpu
  memory          = each.value.memory
  timeout_seconds = each.value.timeout_seconds
  concurrency     = each.value.concurrency
  min_instances   = each.value.min_instances
  max_instances   = each.value.max_instances
  env             = each.value.env
  queue = merge(each.value.queue, {
    max_concurrent_dispatches = coalesce(each.value.queue.max_concurrent_dispatches, each.value.max_instances * each.value.concurrency)
  })
  deletion_protection = var.deletion_protection

  depends_on = [google_project_service.apis]
}

# --- Function source ---------------------------------------------------------

resource "google_storage_bucket" "function_source" {
  project                     = var.project_id
  name                        = "${var.project_id}-${var.name_prefix}-fn-source"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  # Only build inputs live here; Terraform re-uploads a missing source zip.
  force_destroy = true

  lifecycle_rule {
    condition {
      age = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# The Go buildpack builds the package at the root of this zip (see README.md,
# "Function source"): the Servo module root with a root package that imports
# ./functions. Test files, Terraform, CI and examples stay out.
data "archive_file" "function_source" {
  type             = "zip"
  source_dir       = local.source_dir
  output_path      = "${path.module}/.build/function-source.zip"
  output_file_mode = "0644"
  excludes         = var.function_source_excludes

  lifecycle {
    precondition {
      condition     = fileexists("${local.source_dir}/go.mod") && fileexists("${local.source_dir}/go.sum")
      error_message = "function_source_dir (${local.source_dir}) must be the root of the Servo Go module, with go.mod and go.sum."
    }
    precondition {
      condition     = length([for f in fileset(local.source_dir, "*.go") : f if !endswith(f, "_test.go")]) > 0
      error_message = "The Go buildpack builds the Go package at the root of the function source, and ${local.source_dir} has none: add the root package file described in terraform/README.md (\"Function source\")."
    }
  }
}

resource "google_storage_bucket_object" "function_source" {
  # A new name per content: a changed zip redeploys the functions.
  name         = "function-source-${data.archive_file.function_source.output_md5}.zip"
  bucket       = google_storage_bucket.function_source.name
  source       = data.archive_file.function_source.output_path
  content_type = "application/zip"
}

# --- Logs --------------------------------------------------------------------

# Cloud Run writes a request log entry for every request; the callbacks
# function's successful ones (started, heartbeat, completed answered below
# 400) say nothing Servo's own lines and metrics do not, and cost an
# ingestion each (docs/cost.md). Excluded entries are neither stored nor
# billed; a failed request's entry is kept.
resource "google_logging_project_exclusion" "ok_callback_requests" {
  count = var.exclude_ok_request_logs ? 1 : 0

  project     = var.project_id
  name        = "${var.name_prefix}-ok-callback-requests"
  description = "Servo (${var.name_prefix}): request logs of the callbacks function's successful requests (exclude_ok_request_logs)"
  filter = join(" AND ", [
    "resource.type=\"cloud_run_revision\"",
    "resource.labels.service_name=\"${module.function["callbacks"].service_name}\"",
    "logName=\"projects/${var.project_id}/logs/run.googleapis.com%2Frequests\"",
    "httpRequest.status<400",
  ])

  depends_on = [google_project_service.apis]
}

# The api function's successful submits (POST /v1/tasks and
# POST /v1/tasks:batch, answered below 400) likewise: a submit's own line
# ("task submitted") names the task, its state and its Cloud Task, so its
# request log entry adds only an ingestion per submit. Every other api
# request (reads, cancels, admin) and every failed submit keeps its entry.
# The URL is matched whole (=~, an RE2 regular expression of the Logging
# query language, which exclusion filters use:
# https://cloud.google.com/logging/docs/view/logging-query-language and
# https://cloud.google.com/logging/docs/exclusions, read 2026-11-27), so
# that no other path, nor a query string, can hide a request's entry.
resource "google_logging_project_exclusion" "ok_submit_requests" {
  count = var.exclude_ok_request_logs ? 1 : 0

  project     = var.project_id
  name        = "${var.name_prefix}-ok-submit-requests"
  description = "Servo (${var.name_prefix}): request logs of the api function's successful submits, POST /v1/tasks and /v1/tasks:batch (exclude_ok_request_logs)"
  filter = join(" AND ", [
    "resource.type=\"cloud_run_revision\"",
    "resource.labels.service_name=\"${module.function["api"].service_name}\"",
    "logName=\"projects/${var.project_id}/logs/run.googleapis.com%2Frequests\"",
    "httpRequest.status<400",
    "httpRequest.requestMethod=\"POST\"",
    "httpRequest.requestUrl=~\"^(https?://[^/?#]+)?/v1/tasks(:batch)?([?].*)?$\"",
  ])

  depends_on = [google_project_service.apis]
}

# --- Functions ---------------------------------------------------------------

module "function" {
  source   = "./modules/function"
  for_each = local.functions

  project_id            = var.project_id
  region                = var.region
  name                  = each.value.name
  description           = each.value.description
  entry_point           = each.value.entry_point
  runtime               = var.functions_runtime
  source_bucket         = google_storage_bucket.function_source.name
  source_object         = google_storage_bucket_object.function_source.name
  build_service_account = google_service_account.component["fn-build"].id
  docker_repository     = google_artifact_registry_repository.images.id
  service_account_email = google_service_account.component[each.key].email
  environment           = local.function_env
  secret_environment = {
    SERVO_TOKEN_KEYS = {
      secret = module.signing_keys.secret_id
      # Not pinned: a rotation (by Terraform or by `servo keys --secret`)
      # reaches new instances without a redeploy, and running ones through
      # SERVO_TOKEN_KEYS_SECRET.
      version = "latest"
    }
  }
  memory          = each.value.sizing.memory
  cpu             = each.value.sizing.cpu
  timeout_seconds = each.value.sizing.timeout_seconds
  min_instances   = each.value.sizing.min_instances
  max_instances   = lookup(local.function_max_instances, each.key, each.value.sizing.max_instances)
  concurrency     = each.value.sizing.concurrency
  pubsub_trigger  = each.value.pubsub
  billing         = lookup(local.functions_billing, each.key, "request")
  expected_url = lookup({
    api       = local.functions_billing.api == "instance" ? local.api_audiences[1] : local.api_audiences[0]
    callbacks = local.callbacks_url
    claim     = local.claim_url
    jobs      = local.jobs_function_url
  }, each.key, null)

  # The runtime accounts' grants (secret, topics, queues, actAs) and the
  # builder's must exist, and have propagated, before the first revision
  # starts or builds: terraform_data.iam_propagation follows every grant
  # and waits iam_propagation_wait_seconds (iam.tf). The ring's secret
  # version before a revision mounts "latest"; the Firestore database, its
  # indexes and TTL policies before the sweeper's first queries (which fail
  # FAILED_PRECONDITION while an index is missing); the Pub/Sub and
  # Eventarc service agents before the sweeper's trigger.
  depends_on = [
    terraform_data.service_identity,
    terraform_data.iam_propagation,
    module.signing_keys,
    module.firestore,
  ]
}

# --- Due shards: lowered only with servo migrate --due-shards -------------------

# The data depends on due_shards: each task and outbox entry keeps the due
# shard it was given, and the sweeper queries shards [0, SERVO_DUE_SHARDS)
# only, so a task in a shard no longer queried would never be swept,
# re-driven or listed. The functions are the hard stop: they refuse to
# start when SERVO_DUE_SHARDS is below a shard the database uses (every
# request 503; internal/server, store.DueShardsInUse; docs/operations.md,
# "Due shards"). This check is Terraform's early word, where it can see the
# old value: at plan time it reads the deployed sweeper's SERVO_DUE_SHARDS
# (the data source reads before anything is applied: it depends on no
# managed resource, only on variables) and warns when due_shards is lower.
# A check never fails a plan or an apply: a failed assertion, and an error
# of its data source (no sweeper yet on a first apply: "not found"; no
# network or credentials in CI's offline plans), are warnings.
check "due_shards_not_lowered" {
  data "google_cloudfunctions2_function" "deployed_sweeper" {
    project  = var.project_id
    location = var.region
    name     = local.sweeper_name
  }

  assert {
    # try: a sweeper whose environment has no SERVO_DUE_SHARDS, or no
    # number there, gives nothing to compare (0).
    condition     = var.due_shards >= try(tonumber(data.google_cloudfunctions2_function.deployed_sweeper.service_config[0].environment_variables["SERVO_DUE_SHARDS"]), 0)
    error_message = "due_shards = ${var.due_shards} is below the ${try(data.google_cloudfunctions2_function.deployed_sweeper.service_config[0].environment_variables["SERVO_DUE_SHARDS"], "?")} due shards the deployed sweeper (${local.sweeper_name}) queries. Tasks and outbox entries keep their shard, and those above the new count would never be swept, re-driven or listed until moved. Applied as it is, the functions refuse to start while the database holds a task or outbox entry in a shard at or above ${var.due_shards} (every request answers 503 misconfigured), until `servo migrate --project ${var.project_id} --database ${var.firestore_database} --due-shards ${var.due_shards}` moves them (run it after this apply); or set due_shards back to at least the deployed value (docs/operations.md, \"Due shards\")."
  }
}
