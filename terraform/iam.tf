# Identities and least privilege.
#
# One service account per component, and one table (local.grants) listing
# every role each of them holds and on which resource. The IAM resources
# below only expand that table, one resource type per kind of target; no
# other file grants roles. deploy/terraform_test.go checks the table against
# the roles each component's code uses, that no primitive role appears, and
# that the resources below are the module's only IAM grants.

locals {
  # key => what the account is for. The account ID is "<name_prefix>-<key>".
  # Worker runtime accounts are created per worker in modules/worker and
  # hold no roles: a worker only calls the public callbacks function.
  service_accounts = {
    api           = "Runs the Servo control API function."
    callbacks     = "Runs the Servo callbacks function."
    sweeper       = "Runs the Servo sweeper function."
    scheduler     = "Cloud Scheduler job identity: publishes sweep ticks."
    tasks-invoker = "Cloud Tasks OIDC identity: calls the worker services."
    sweep-trigger = "Eventarc trigger identity: pushes sweep ticks to the sweeper function."
    fn-build      = "Cloud Build identity that builds the function source."
  }

  # Every grant: account key, role, target. Targets:
  #   project                       the project (only where the resource has no IAM of its own)
  #   secret                        the token signing-key secret
  #   topic:<events|dead_letter|sweep>
  #   sa:<account key>              one of the service accounts above
  #   queues                        every worker's Cloud Tasks queue
  #   worker-services               every worker's Cloud Run service
  #   function:<api|callbacks|sweeper>  a function's Cloud Run service
  #   repo                          the Artifact Registry repository
  #   bucket                        the function source bucket
  grants = [
    # Control API: reads and writes tasks, signs tokens, enqueues and cancels
    # (deletes) Cloud Tasks tasks with the invoker's OIDC identity, publishes
    # transition events and dead letters.
    { sa = "api", role = "roles/datastore.user", on = "project" },
    { sa = "api", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "api", role = "roles/cloudtasks.enqueuer", on = "queues" },
    { sa = "api", role = "roles/cloudtasks.taskDeleter", on = "queues" },
    { sa = "api", role = "roles/iam.serviceAccountUser", on = "sa:tasks-invoker" },
    { sa = "api", role = "roles/pubsub.publisher", on = "topic:events" },
    { sa = "api", role = "roles/pubsub.publisher", on = "topic:dead_letter" },

    # Callbacks: transitions, token checks, retries as new attempts.
    { sa = "callbacks", role = "roles/datastore.user", on = "project" },
    { sa = "callbacks", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "callbacks", role = "roles/cloudtasks.enqueuer", on = "queues" },
    { sa = "callbacks", role = "roles/iam.serviceAccountUser", on = "sa:tasks-invoker" },
    { sa = "callbacks", role = "roles/pubsub.publisher", on = "topic:events" },
    { sa = "callbacks", role = "roles/pubsub.publisher", on = "topic:dead_letter" },

    # Sweeper: zombies, timeouts, re-drives and due retries.
    { sa = "sweeper", role = "roles/datastore.user", on = "project" },
    { sa = "sweeper", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "sweeper", role = "roles/cloudtasks.enqueuer", on = "queues" },
    { sa = "sweeper", role = "roles/iam.serviceAccountUser", on = "sa:tasks-invoker" },
    { sa = "sweeper", role = "roles/pubsub.publisher", on = "topic:events" },
    { sa = "sweeper", role = "roles/pubsub.publisher", on = "topic:dead_letter" },

    # Telemetry (package telemetry): each function exports its spans to
    # Cloud Trace and its metrics to Cloud Monitoring (neither has a
    # narrower target than the project).
    { sa = "api", role = "roles/cloudtrace.agent", on = "project" },
    { sa = "api", role = "roles/monitoring.metricWriter", on = "project" },
    { sa = "callbacks", role = "roles/cloudtrace.agent", on = "project" },
    { sa = "callbacks", role = "roles/monitoring.metricWriter", on = "project" },
    { sa = "sweeper", role = "roles/cloudtrace.agent", on = "project" },
    { sa = "sweeper", role = "roles/monitoring.metricWriter", on = "project" },

    # Cloud Scheduler: publishes ticks to the sweep topic, nothing else.
    { sa = "scheduler", role = "roles/pubsub.publisher", on = "topic:sweep" },

    # Cloud Tasks pushes to the workers with this account's OIDC token.
    { sa = "tasks-invoker", role = "roles/run.invoker", on = "worker-services" },

    # Eventarc pushes sweep ticks to the sweeper with this account's token.
    { sa = "sweep-trigger", role = "roles/run.invoker", on = "function:sweeper" },

    # Cloud Build builds the function source: reads the zip, writes the
    # image to the repository, writes build logs (logs have no narrower
    # target than the project).
    { sa = "fn-build", role = "roles/logging.logWriter", on = "project" },
    { sa = "fn-build", role = "roles/storage.objectViewer", on = "bucket" },
    { sa = "fn-build", role = "roles/artifactregistry.writer", on = "repo" },
  ]

  # The table split by target kind (the part of "on" before ":"), keyed
  # "account role target" for stable resource addresses.
  grants_by_kind = {
    for kind in ["project", "secret", "topic", "sa", "queues", "worker-services", "function", "repo", "bucket"] :
    kind => { for g in local.grants : "${g.sa} ${g.role} ${g.on}" => g if split(":", g.on)[0] == kind }
  }
}

resource "google_project_iam_member" "grant" {
  for_each = local.grants_by_kind["project"]

  project = var.project_id
  role    = each.value.role
  member  = google_service_account.component[each.value.sa].member
}

resource "google_secret_manager_secret_iam_member" "grant" {
  for_each = local.grants_by_kind["secret"]

  project   = var.project_id
  secret_id = module.signing_keys.secret_id
  role      = each.value.role
  member    = google_service_account.component[each.value.sa].member
}

resource "google_pubsub_topic_iam_member" "grant" {
  for_each = local.grants_by_kind["topic"]

  project = var.project_id
  topic   = google_pubsub_topic.topic[split(":", each.value.on)[1]].name
  role    = each.value.role
  member  = google_service_account.component[each.value.sa].member
}

resource "google_service_account_iam_member" "grant" {
  for_each = local.grants_by_kind["sa"]

  service_account_id = google_service_account.component[split(":", each.value.on)[1]].name
  role               = each.value.role
  member             = google_service_account.component[each.value.sa].member
}

resource "google_cloud_tasks_queue_iam_member" "grant" {
  for_each = {
    for pair in setproduct(values(local.grants_by_kind["queues"]), keys(var.workers)) :
    "${pair[0].sa} ${pair[0].role} ${pair[1]}" => { sa = pair[0].sa, role = pair[0].role, worker = pair[1] }
  }

  project  = var.project_id
  location = var.region
  name     = module.worker[each.value.worker].queue_name
  role     = each.value.role
  member   = google_service_account.component[each.value.sa].member
}

resource "google_cloud_run_v2_service_iam_member" "grant_worker" {
  for_each = {
    for pair in setproduct(values(local.grants_by_kind["worker-services"]), keys(var.workers)) :
    "${pair[0].sa} ${pair[0].role} ${pair[1]}" => { sa = pair[0].sa, role = pair[0].role, worker = pair[1] }
  }

  project  = var.project_id
  location = var.region
  name     = module.worker[each.value.worker].service_name
  role     = each.value.role
  member   = google_service_account.component[each.value.sa].member
}

resource "google_cloud_run_v2_service_iam_member" "grant_function" {
  for_each = local.grants_by_kind["function"]

  project  = var.project_id
  location = var.region
  name     = module.function[split(":", each.value.on)[1]].service_name
  role     = each.value.role
  member   = google_service_account.component[each.value.sa].member
}

resource "google_artifact_registry_repository_iam_member" "grant" {
  for_each = local.grants_by_kind["repo"]

  project    = var.project_id
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = each.value.role
  member     = google_service_account.component[each.value.sa].member
}

resource "google_storage_bucket_iam_member" "grant" {
  for_each = local.grants_by_kind["bucket"]

  bucket = google_storage_bucket.function_source.name
  role   = each.value.role
  member = google_service_account.component[each.value.sa].member
}

# --- Who may call the functions (principals outside Servo) --------------------

# The control API: only the principals in var.api_invokers.
resource "google_cloud_run_v2_service_iam_member" "api_invoker" {
  for_each = toset(var.api_invokers)

  project  = var.project_id
  location = var.region
  name     = module.function["api"].service_name
  role     = "roles/run.invoker"
  member   = each.value
}

# The callbacks are public: every request carries a task token (HS256, kid
# from the key ring), checked before anything is read.
resource "google_cloud_run_v2_service_iam_member" "callbacks_public" {
  project  = var.project_id
  location = var.region
  name     = module.function["callbacks"].service_name
  role     = "roles/run.invoker"
  member   = "allUsers"
}
