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
    claim         = "Runs the Servo claim function (pull pools)."
    jobs          = "Runs the Servo jobs dispatch function: runs job workers' Cloud Run Jobs."
  }

  # Every grant: account key, role, target. Targets:
  #   project                       the project (only where the resource has no IAM of its own)
  #   database                      the environment's Firestore database only: a project
  #                                 grant with an IAM condition on resource.name
  #   secret                        the token signing-key secret
  #   topic:<events|dead_letter|sweep>
  #   sa:<account key>              one of the service accounts above
  #   queues                        every Cloud Tasks queue of every worker
  #   worker-services               every worker's Cloud Run service
  #   function:<api|callbacks|sweeper>  a function's Cloud Run service
  #   repo                          the Artifact Registry repository
  #   bucket                        the function source bucket
  #   pool-topics                   every pull pool's topic (pull.tf)
  #   pool-subscriptions            every pull pool's subscription (pull.tf)
  #   jobs                          every job worker's Cloud Run Job (jobs.tf); roles
  #                                 "custom:<id>" are jobs.tf's custom roles
  grants = [
    # Control API: reads and writes tasks, signs tokens, enqueues and cancels
    # (deletes) Cloud Tasks tasks with the invoker's OIDC identity, publishes
    # transition events and dead letters.
    { sa = "api", role = "roles/datastore.user", on = "database" },
    { sa = "api", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "api", role = "roles/cloudtasks.enqueuer", on = "queues" },
    { sa = "api", role = "roles/cloudtasks.taskDeleter", on = "queues" },
    { sa = "api", role = "roles/iam.serviceAccountUser", on = "sa:tasks-invoker" },
    # The event stream (GET /v1/events): a temporary subscription to the
    # events topic per stream.
    { sa = "api", role = "roles/pubsub.subscriber", on = "topic:events" },
    { sa = "api", role = "custom:servoEventStreamer", on = "project" },
    { sa = "api", role = "roles/pubsub.publisher", on = "topic:events" },
    { sa = "api", role = "roles/pubsub.publisher", on = "topic:dead_letter" },
    { sa = "api", role = "roles/pubsub.publisher", on = "pool-topics" },

    # Callbacks: transitions, token checks, retries as new attempts.
    { sa = "callbacks", role = "roles/datastore.user", on = "database" },
    { sa = "callbacks", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "callbacks", role = "roles/cloudtasks.enqueuer", on = "queues" },
    { sa = "callbacks", role = "roles/iam.serviceAccountUser", on = "sa:tasks-invoker" },
    { sa = "callbacks", role = "roles/pubsub.publisher", on = "topic:events" },
    { sa = "callbacks", role = "roles/pubsub.publisher", on = "topic:dead_letter" },
    { sa = "callbacks", role = "roles/pubsub.publisher", on = "pool-topics" },

    # Sweeper: zombies, timeouts, re-drives and due retries.
    { sa = "sweeper", role = "roles/datastore.user", on = "database" },
    { sa = "sweeper", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "sweeper", role = "roles/cloudtasks.enqueuer", on = "queues" },
    { sa = "sweeper", role = "roles/iam.serviceAccountUser", on = "sa:tasks-invoker" },
    { sa = "sweeper", role = "roles/pubsub.publisher", on = "topic:events" },
    { sa = "sweeper", role = "roles/pubsub.publisher", on = "topic:dead_letter" },
    { sa = "sweeper", role = "roles/pubsub.publisher", on = "pool-topics" },
    # Leftover event-stream subscriptions: listed on the events topic,
    # deleted (events.DeleteLeftoverStreams).
    { sa = "sweeper", role = "roles/pubsub.viewer", on = "topic:events" },
    { sa = "sweeper", role = "custom:servoStreamCleaner", on = "project" },

    # Claim function (pull pools): receives and acknowledges the pools'
    # messages, applies claims, signs tokens, publishes transition events.
    { sa = "claim", role = "roles/datastore.user", on = "database" },
    { sa = "claim", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "claim", role = "roles/pubsub.subscriber", on = "pool-subscriptions" },
    { sa = "claim", role = "roles/pubsub.publisher", on = "topic:events" },
    { sa = "claim", role = "roles/pubsub.publisher", on = "topic:dead_letter" },

    # Telemetry (package telemetry): each function exports its spans to
    # Cloud Trace and its metrics to Cloud Monitoring, both over OTLP (the
    # Telemetry API: telemetry.traces.write, telemetry.metrics.write;
    # neither has a narrower target than the project).
    { sa = "api", role = "roles/telemetry.tracesWriter", on = "project" },
    { sa = "api", role = "roles/telemetry.metricsWriter", on = "project" },
    { sa = "callbacks", role = "roles/telemetry.tracesWriter", on = "project" },
    { sa = "callbacks", role = "roles/telemetry.metricsWriter", on = "project" },
    { sa = "sweeper", role = "roles/telemetry.tracesWriter", on = "project" },
    { sa = "sweeper", role = "roles/telemetry.metricsWriter", on = "project" },
    { sa = "claim", role = "roles/telemetry.tracesWriter", on = "project" },
    { sa = "claim", role = "roles/telemetry.metricsWriter", on = "project" },
    { sa = "jobs", role = "roles/telemetry.tracesWriter", on = "project" },
    { sa = "jobs", role = "roles/telemetry.metricsWriter", on = "project" },

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

    # Jobs dispatch (ServoJobs): reads the task, records the execution,
    # verifies the envelope's token, runs the job with overrides, finds and
    # cancels executions (jobs.tf). The sweeper and the callbacks cancel
    # the execution of an attempt whose lease or cancel grace ran out.
    # Cloud Tasks calls ServoJobs with the invoker's OIDC token.
    { sa = "jobs", role = "roles/datastore.user", on = "database" },
    { sa = "jobs", role = "roles/secretmanager.secretAccessor", on = "secret" },
    { sa = "jobs", role = "custom:servoJobDispatcher", on = "jobs" },
    { sa = "sweeper", role = "custom:servoJobCanceller", on = "jobs" },
    { sa = "callbacks", role = "custom:servoJobCanceller", on = "jobs" },
    { sa = "tasks-invoker", role = "roles/run.invoker", on = "function:jobs" },
  ]

  # Every (worker, queue index) pair: a worker has
  # ceil(queue.max_dispatches_per_second / 500) queues (modules/worker).
  worker_queue_indexes = flatten([for name, w in var.workers :
    [for i in range(ceil(w.queue.max_dispatches_per_second / 500)) : { worker = name, index = i }]
  ])

  # The table split by target kind (the part of "on" before ":"), keyed
  # "account role target" for stable resource addresses.
  grants_by_kind = {
    for kind in ["project", "database", "secret", "topic", "sa", "queues", "worker-services", "function", "repo", "bucket", "pool-topics", "pool-subscriptions", "jobs"] :
    kind => { for g in local.grants : "${g.sa} ${g.role} ${g.on}" => g if split(":", g.on)[0] == kind }
  }
}

# Roles "custom:<id>" are the custom roles of jobs.tf.
resource "google_project_iam_member" "grant" {
  for_each = local.grants_by_kind["project"]

  project = var.project_id
  role    = startswith(each.value.role, "custom:") ? google_project_iam_custom_role.job[trimprefix(each.value.role, "custom:")].name : each.value.role
  member  = google_service_account.component[each.value.sa].member
}

# Firestore has no IAM of its own below the project: the grant is on the
# project, limited by a condition to this environment's database (and its
# documents), so that two environments in one project cannot read each
# other's data.
resource "google_project_iam_member" "grant_database" {
  for_each = local.grants_by_kind["database"]

  project = var.project_id
  role    = each.value.role
  member  = google_service_account.component[each.value.sa].member

  condition {
    title       = "${var.name_prefix}-firestore-${var.firestore_database == "(default)" ? "default" : var.firestore_database}"
    description = "Only the Firestore database of Servo environment ${var.name_prefix}."
    expression  = "resource.name == \"${local.database_name}\" || resource.name.startsWith(\"${local.database_name}/\")"
  }
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

# On every queue of every worker; the first queue's keys are those of a
# single-queue worker, the others' end in -q1, -q2, ... like their names.
resource "google_cloud_tasks_queue_iam_member" "grant" {
  for_each = {
    for pair in setproduct(values(local.grants_by_kind["queues"]), local.worker_queue_indexes) :
    "${pair[0].sa} ${pair[0].role} ${pair[1].worker}${pair[1].index == 0 ? "" : "-q${pair[1].index}"}" => { sa = pair[0].sa, role = pair[0].role, worker = pair[1].worker, index = pair[1].index }
  }

  project  = var.project_id
  location = var.region
  name     = module.worker[each.value.worker].queue_names[each.value.index]
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

# pool-topics and pool-subscriptions: each row once per pull pool.
resource "google_pubsub_topic_iam_member" "grant_pool" {
  for_each = { for pair in setproduct(keys(local.grants_by_kind["pool-topics"]), keys(var.pull_pools)) : "${pair[0]} ${pair[1]}" => merge(local.grants_by_kind["pool-topics"][pair[0]], { pool = pair[1] }) }

  project = var.project_id
  topic   = google_pubsub_topic.pool[each.value.pool].name
  role    = each.value.role
  member  = google_service_account.component[each.value.sa].member
}

resource "google_pubsub_subscription_iam_member" "grant_pool" {
  for_each = { for pair in setproduct(keys(local.grants_by_kind["pool-subscriptions"]), keys(var.pull_pools)) : "${pair[0]} ${pair[1]}" => merge(local.grants_by_kind["pool-subscriptions"][pair[0]], { pool = pair[1] }) }

  project      = var.project_id
  subscription = google_pubsub_subscription.pool[each.value.pool].name
  role         = each.value.role
  member       = google_service_account.component[each.value.sa].member
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

# --- Propagation ---------------------------------------------------------------

# IAM is eventually consistent: a grant typically takes effect within 2
# minutes, sometimes 7 or more
# (https://cloud.google.com/iam/docs/access-change-propagation). A function
# build reads the source bucket and writes the repository as fn-build, and a
# new revision mounts the key ring as its runtime account, right after
# Terraform makes those grants: a first apply could stop there on
# PERMISSION_DENIED and need a second one. The functions
# (module.function in main.tf) wait for this instead: it follows every grant
# above (every IAM resource that does not need a function itself) and
# sleeps iam_propagation_wait_seconds. Replaced, so waiting again, only when
# the table of grants changes: a later apply that grants nothing new does
# not wait.
resource "terraform_data" "iam_propagation" {
  triggers_replace = sort([for g in local.grants : "${g.sa} ${g.role} ${g.on}"])

  provisioner "local-exec" {
    command = "sleep ${var.iam_propagation_wait_seconds}"
  }

  depends_on = [
    google_project_iam_member.grant,
    google_project_iam_member.grant_database,
    google_secret_manager_secret_iam_member.grant,
    google_pubsub_topic_iam_member.grant,
    google_service_account_iam_member.grant,
    google_cloud_tasks_queue_iam_member.grant,
    google_cloud_run_v2_service_iam_member.grant_worker,
    google_pubsub_topic_iam_member.grant_pool,
    google_pubsub_subscription_iam_member.grant_pool,
    google_artifact_registry_repository_iam_member.grant,
    google_storage_bucket_iam_member.grant,
    google_cloud_run_v2_job_iam_member.grant,
    google_pubsub_topic_iam_member.pool_dead_letter_agent,
    google_pubsub_subscription_iam_member.pool_dead_letter_agent,
  ]
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

# The claim function: only the pull pools' service accounts (var.pull_pools);
# the function also checks each caller against its pool.
resource "google_cloud_run_v2_service_iam_member" "claim_invoker" {
  for_each = local.pool_callers

  project  = var.project_id
  location = var.region
  name     = module.function["claim"].service_name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${each.value}"
}

# Dead-lettering: the Pub/Sub service agent forwards a pool's undeliverable
# messages to its dead-letter topic (publisher there) and acknowledges them
# on the pool's subscription (subscriber there); nothing wider.
resource "google_pubsub_topic_iam_member" "pool_dead_letter_agent" {
  for_each = var.pull_pools

  project = var.project_id
  topic   = google_pubsub_topic.pool_dead_letter[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:service-${local.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"

  depends_on = [terraform_data.service_identity]
}

resource "google_pubsub_subscription_iam_member" "pool_dead_letter_agent" {
  for_each = var.pull_pools

  project      = var.project_id
  subscription = google_pubsub_subscription.pool[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:service-${local.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"

  depends_on = [terraform_data.service_identity]
}

# Roles "custom:<id>" are the custom roles of jobs.tf.
resource "google_cloud_run_v2_job_iam_member" "grant" {
  for_each = {
    for pair in setproduct(values(local.grants_by_kind["jobs"]), keys(var.jobs)) :
    "${pair[0].sa} ${pair[0].role} ${pair[1]}" => {
      sa   = pair[0].sa
      role = startswith(pair[0].role, "custom:") ? google_project_iam_custom_role.job[trimprefix(pair[0].role, "custom:")].name : pair[0].role
      job  = pair[1]
    }
  }

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_job.job[each.value.job].name
  role     = each.value.role
  member   = google_service_account.component[each.value.sa].member
}
