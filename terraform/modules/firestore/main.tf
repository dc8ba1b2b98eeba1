# Servo's state: one Firestore database in native mode, the composite
# indexes its queries need and the TTL policies that expire old documents.
#
# The indexes, TTL fields and single-field index exemptions are exactly
# store.Indexes, store.TTLFields and store.FieldExemptions
# (store/indexes.go); deploy/terraform_test.go fails when they differ, so
# change both together. Each index is spelled out (no for_each) so the test
# reads what is deployed.
#
# --- Creation order and timeouts ---------------------------------------------
#
# Every composite index and field configuration is a long-running operation
# on the one database, and Firestore answers concurrent ones with 409s:
# "Aborted due to cross-transaction contention" and "Please retry,
# underlying data changed" for indexes
# (https://github.com/hashicorp/terraform-provider-google/issues/16599 and
# /issues/16664), "Please retry, underlying data changed" for fields
# (/issues/16329); the Firebase CLI met "too much contention" creating 21
# indexes at once and now creates them one at a time
# (https://github.com/firebase/firebase-tools/issues/1119, /pull/1120). The
# google provider retries those 409s (transport.FirestoreIndex409Retry,
# FirestoreField409RetryUnderlyingDataChanged, since
# GoogleCloudPlatform/magic-modules#9515 and #9329), but only within the
# resource's timeout, 20 minutes by default, which also bounds the wait for
# an index to build (google/services/firestore/resource_firestore_index.go,
# provider 7.x). A create that times out forgets an index still building,
# and the next apply then fails with 409 "index already exists".
#
# So, on a first apply (about 20 indexes and 100 field configurations) as
# on any later one:
#   - the operations are chained: each index depends_on the index declared
#     before it (files in the order main.tf, layout.tf, schedules.tf,
#     tenants.tf), except the first of each of 3 chains, and each field on
#     the field before it, except the first of each of 4 chains. At most 3
#     index builds and 4 field updates run at once, whatever Terraform's
#     -parallelism, instead of up to 10 of all of them; Terraform has no
#     per-resource parallelism setting, and depends_on keeps the resource
#     addresses (a for_each would rename them and re-create every index).
#     A new index or field goes at the end of a chain: depends_on = [the
#     resource above it] (deploy/firstapply_test.go checks the chains);
#   - every index and field has timeouts of 2 h to create or update and 1 h
#     to delete: room for the provider's retries and for a build on a large
#     database.

resource "google_firestore_database" "this" {
  project     = var.project_id
  name        = var.database
  location_id = var.location
  type        = "FIRESTORE_NATIVE"

  delete_protection_state = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  # terraform destroy forgets the database but keeps it and its data; delete
  # it with gcloud if you mean to (README.md, "Tear down").
  deletion_policy = "ABANDON"
}

# --- Composite indexes (store.Indexes) -----------------------------------
#
# Every due index leads with dueShard (a number per task in [0, 16)), so a
# steadily increasing due time is written into 16 separate index ranges
# instead of one: docs/scale.md.

# Sweeper: leases past due (RUNNING, CANCELLING).
resource "google_firestore_index" "tasks_due_shard_state_lease_expires_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "leaseExpiresAt"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  # First of composite-index chain 1 of 3: waits for no other index
  # (main.tf, "Creation order and timeouts").
}

# Sweeper: cancel grace periods past due (CANCELLING).
resource "google_firestore_index" "tasks_due_shard_state_cancel_deadline" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "cancelDeadline"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_state_lease_expires_at]
}

# Sweeper: dispatches to check (PENDING, QUEUED).
resource "google_firestore_index" "tasks_due_shard_state_dispatch_check_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "dispatchCheckAt"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_state_cancel_deadline]
}

# Sweeper: task deadlines past due (every non-terminal state).
resource "google_firestore_index" "tasks_due_shard_state_deadline" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "deadline"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_state_dispatch_check_at]
}

# Publisher re-drive: undelivered events due for a (re)try.
resource "google_firestore_index" "outbox_due_shard_delivered_next_try_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "delivered"
    order      = "ASCENDING"
  }
  fields {
    field_path = "nextTryAt"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_state_deadline]
}

# --- Single-field index exemptions (store.FieldExemptions) -------------------
#
# Firestore indexes every field on its own unless told otherwise. No query
# uses these fields alone: large or opaque values would only add write cost,
# and steadily increasing timestamps would hot-spot their index at a few
# hundred writes a second. Composite indexes that name a field still work.

resource "google_firestore_field" "tasks_payload" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "payload"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  # First of field chain 1 of 4: waits for no other field (main.tf,
  # "Creation order and timeouts").
}

resource "google_firestore_field" "tasks_resources" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "resources"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_payload]
}

resource "google_firestore_field" "tasks_resume_from" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "resumeFrom"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_resources]
}

resource "google_firestore_field" "tasks_live" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "live"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_resume_from]
}

# Fields no query filters or orders on (tasks are queried by due shard,
# state, tenant, run, worker and quota fields; attempt records by task, in
# attempt order): their index entries would only cost storage.
resource "google_firestore_field" "tasks_timing" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "timing"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_live]
}

resource "google_firestore_field" "tasks_retry" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "retry"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_timing]
}

resource "google_firestore_field" "tasks_attempt" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "attempt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_retry]
}

resource "google_firestore_field" "tasks_seq" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "seq"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_attempt]
}

resource "google_firestore_field" "tasks_reason" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "reason"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_seq]
}

resource "google_firestore_field" "tasks_cancel_reason" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "cancelReason"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_reason]
}

resource "google_firestore_field" "tasks_redrives" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "redrives"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_cancel_reason]
}

resource "google_firestore_field" "tasks_idempotency_key" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "idempotencyKey"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_redrives]
}

resource "google_firestore_field" "tasks_task_key" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "taskKey"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_idempotency_key]
}

resource "google_firestore_field" "tasks_rerun_of" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "rerunOf"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_task_key]
}

resource "google_firestore_field" "tasks_asset_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "assetId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_rerun_of]
}

resource "google_firestore_field" "tasks_workspace_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "workspaceId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_asset_id]
}

resource "google_firestore_field" "tasks_trace" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "trace"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_workspace_id]
}

resource "google_firestore_field" "tasks_ended_attempt" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "endedAttempt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_trace]
}

# What Cloud Tasks last said of a waiting push attempt's delivery (shown
# on GET /v1/tasks/{id}; store.FieldExemptions).
resource "google_firestore_field" "tasks_delivery" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "delivery"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_ended_attempt]
}

resource "google_firestore_field" "tasks_recorded" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "recorded"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_delivery]
}

resource "google_firestore_field" "tasks_own_run" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "ownRun"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_recorded]
}

resource "google_firestore_field" "tasks_priority" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "priority"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_own_run]
}

resource "google_firestore_field" "attempts_outcome" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "outcome"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_priority]
}

resource "google_firestore_field" "attempts_worker_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "workerId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_outcome]
}

resource "google_firestore_field" "attempts_message" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "message"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_worker_id]
}

resource "google_firestore_field" "attempts_progress_pct" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "progressPct"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_message]
}

resource "google_firestore_field" "attempts_heartbeats" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "heartbeats"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_progress_pct]
}

resource "google_firestore_field" "attempts_cancelled_during_phase" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "cancelledDuringPhase"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  # First of field chain 2 of 4: waits for no other field (main.tf,
  # "Creation order and timeouts").
}

resource "google_firestore_field" "attempts_execution" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "execution"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_cancelled_during_phase]
}

resource "google_firestore_field" "attempts_completion_digest" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "completionDigest"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_execution]
}

# A task's recent transitions (the events endpoints read them with the
# task; store.FieldExemptions).
resource "google_firestore_field" "tasks_history" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "history"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_completion_digest]
}

resource "google_firestore_field" "attempts_output" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "output"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_history]
}

resource "google_firestore_field" "attempts_checkpoint" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "checkpoint"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_output]
}

resource "google_firestore_field" "attempts_error" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "error"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_checkpoint]
}

resource "google_firestore_field" "attempts_metrics" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "metrics"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_error]
}

resource "google_firestore_field" "attempts_partial_progress" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "partialProgress"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_metrics]
}

resource "google_firestore_field" "attempts_heartbeat_ticks" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "heartbeatTicks"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_partial_progress]
}

resource "google_firestore_field" "outbox_error" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "error"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_heartbeat_ticks]
}

# A commit's transitions before the last, on its one outbox document.
resource "google_firestore_field" "outbox_earlier" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "earlier"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_error]
}

resource "google_firestore_field" "tasks_created_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "createdAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_earlier]
}

resource "google_firestore_field" "tasks_updated_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "updatedAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_created_at]
}

resource "google_firestore_field" "tasks_ended_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "endedAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_updated_at]
}

resource "google_firestore_field" "tasks_not_before" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "notBefore"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_ended_at]
}

resource "google_firestore_field" "tasks_enqueue_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "enqueueAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_not_before]
}

resource "google_firestore_field" "tasks_lease_expires_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "leaseExpiresAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_enqueue_at]
}

resource "google_firestore_field" "tasks_cancel_deadline" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "cancelDeadline"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_lease_expires_at]
}

resource "google_firestore_field" "tasks_dispatch_check_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "dispatchCheckAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_cancel_deadline]
}

resource "google_firestore_field" "tasks_start_timeout_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "startTimeoutAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_dispatch_check_at]
}

resource "google_firestore_field" "tasks_deadline" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "deadline"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_start_timeout_at]
}

resource "google_firestore_field" "attempts_created_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "createdAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_deadline]
}

resource "google_firestore_field" "attempts_scheduled_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "scheduledAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_created_at]
}

resource "google_firestore_field" "attempts_started_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "startedAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_scheduled_at]
}

resource "google_firestore_field" "attempts_completed_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "completedAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_started_at]
}

resource "google_firestore_field" "attempts_last_heartbeat_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "lastHeartbeatAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  # First of field chain 3 of 4: waits for no other field (main.tf,
  # "Creation order and timeouts").
}

resource "google_firestore_field" "attempts_reported_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "reportedAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_last_heartbeat_at]
}

resource "google_firestore_field" "outbox_created_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "createdAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_reported_at]
}

resource "google_firestore_field" "outbox_occurred_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "occurredAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_created_at]
}

resource "google_firestore_field" "outbox_delivered_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "deliveredAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_occurred_at]
}

resource "google_firestore_field" "outbox_next_try_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "nextTryAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_delivered_at]
}

resource "google_firestore_field" "runs_last_submit_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "runs"
  field      = "lastSubmitAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_next_try_at]
}

# --- TTL policies (store.TTLFields) ----------------------------------------
#
# Firestore deletes a document some time after the timestamp in its TTL
# field. The empty index_config exempts the field from single-field
# indexing: no query filters on it, and an indexed, steadily increasing
# timestamp would only add write cost and hotspots.

# Outbox entries: a delivered entry is deleted at once; only the entries an
# older version marked delivered carry expireAt.
resource "google_firestore_field" "outbox_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "expireAt"

  index_config {}
  ttl_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.runs_last_submit_at]
}

resource "google_firestore_field" "idempotency_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "idempotency"
  field      = "expireAt"

  index_config {}
  ttl_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_expire_at]
}

resource "google_firestore_field" "outages_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outages"
  field      = "expireAt"

  index_config {}
  ttl_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.idempotency_expire_at]
}

# Retention (docs/cost.md): an ended task, its attempt records and its
# run's document carry expireAt, stamped by the commit that ends the task
# (or writes the run), SERVO_RETENTION_DAYS after it.

resource "google_firestore_field" "tasks_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "expireAt"

  index_config {}
  ttl_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outages_expire_at]
}

# A field configuration applies to the collection group: every task's
# attempts subcollection.
resource "google_firestore_field" "attempts_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "attempts"
  field      = "expireAt"

  index_config {}
  ttl_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_expire_at]
}

resource "google_firestore_field" "runs_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "runs"
  field      = "expireAt"

  index_config {}
  ttl_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.attempts_expire_at]
}
