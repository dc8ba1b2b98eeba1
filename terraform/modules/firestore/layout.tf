# Servo's storage layout at scale (issue 32; store/indexes.go, store/doc.go
# "Names"): the composite indexes of task and run listings, one range per
# shard (a listing queries every shard and merges the answers), and the
# exemptions of the sequential ids that no query uses alone (a task's
# events are read by name). Part of store.Indexes and store.FieldExemptions,
# checked by deploy/terraform_test.go.

# Task listings (store.List), oldest first.
resource "google_firestore_index" "tasks_due_shard_task_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.outbox_due_shard_delivered_next_try_at]
}

# Task listings (store.List), newest first.
resource "google_firestore_index" "tasks_due_shard_task_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_task_id]
}

# Task listings (store.List), oldest first.
resource "google_firestore_index" "tasks_due_shard_tenant_id_task_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "tenantId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_task_id_desc]
}

# Task listings (store.List), newest first.
resource "google_firestore_index" "tasks_due_shard_tenant_id_task_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "tenantId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  # First of composite-index chain 2 of 3: waits for no other index
  # (main.tf, "Creation order and timeouts").
}

# Task listings (store.List), oldest first.
resource "google_firestore_index" "tasks_due_shard_run_id_task_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "runId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_tenant_id_task_id_desc]
}

# Task listings (store.List), newest first.
resource "google_firestore_index" "tasks_due_shard_run_id_task_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "runId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_run_id_task_id]
}

# Task listings (store.List), oldest first.
resource "google_firestore_index" "tasks_due_shard_state_task_id" {
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
    field_path = "taskId"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_run_id_task_id_desc]
}

# Task listings (store.List), newest first.
resource "google_firestore_index" "tasks_due_shard_state_task_id_desc" {
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
    field_path = "taskId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_state_task_id]
}

# Task listings (store.List), oldest first.
resource "google_firestore_index" "tasks_due_shard_worker_task_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "worker"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_state_task_id_desc]
}

# Task listings (store.List), newest first.
resource "google_firestore_index" "tasks_due_shard_worker_task_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "worker"
    order      = "ASCENDING"
  }
  fields {
    field_path = "taskId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_worker_task_id]
}

# Run listings (store.ListRuns), newest first: a group of the run ids'
# shards a query, merged on read; all tenants' runs, or some tenants'.
resource "google_firestore_index" "runs_due_shard_run_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "runs"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "runId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  # First of composite-index chain 3 of 3: waits for no other index
  # (main.tf, "Creation order and timeouts").
}

resource "google_firestore_index" "runs_due_shard_tenant_id_run_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "runs"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "tenantId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "runId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.runs_due_shard_run_id_desc]
}

# Run listings, the runs that are a task's own (a submit without a runId:
# no run document), read from their tasks.
resource "google_firestore_index" "tasks_due_shard_own_run_run_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "ownRun"
    order      = "ASCENDING"
  }
  fields {
    field_path = "runId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.runs_due_shard_tenant_id_run_id_desc]
}

resource "google_firestore_index" "tasks_due_shard_own_run_tenant_id_run_id_desc" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "ownRun"
    order      = "ASCENDING"
  }
  fields {
    field_path = "tenantId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "runId"
    order      = "DESCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_own_run_run_id_desc]
}

# Sequential ids (ULIDs): exempt from single-field indexing.
resource "google_firestore_field" "tasks_task_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "taskId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.runs_expire_at]
}

# A task's and an outbox entry's run id: a run's counts take the listing
# indexes behind the due shard, its events are read by name through its
# tasks (store.CountByState, store.RunOutboxEntriesOf).
resource "google_firestore_field" "tasks_run_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "runId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_task_id]
}

resource "google_firestore_field" "outbox_run_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "runId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_run_id]
}

resource "google_firestore_field" "outbox_task_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "taskId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_run_id]
}

resource "google_firestore_field" "idempotency_task_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "idempotency"
  field      = "taskId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_task_id]
}

resource "google_firestore_field" "idempotency_created_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "idempotency"
  field      = "createdAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.idempotency_task_id]
}

# Runs are listed behind their shard only (the indexes above): neither the
# sequential run id nor the tenant (a hot tenant's 3 000 runs/s) is
# indexed alone.
resource "google_firestore_field" "runs_run_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "runs"
  field      = "runId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.idempotency_created_at]
}

resource "google_firestore_field" "runs_tenant_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "runs"
  field      = "tenantId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.runs_run_id]
}

# The outbox's fields no query reads alone (store.FieldExemptions).

resource "google_firestore_field" "outbox_event_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "eventId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.runs_tenant_id]
}

resource "google_firestore_field" "outbox_worker" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "worker"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_event_id]
}

resource "google_firestore_field" "outbox_workspace_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "workspaceId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_worker]
}

resource "google_firestore_field" "outbox_tenant_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "tenantId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_workspace_id]
}

resource "google_firestore_field" "outbox_attempt" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "attempt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  # First of field chain 4 of 4: waits for no other field (main.tf,
  # "Creation order and timeouts").
}

resource "google_firestore_field" "outbox_from" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "from"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_attempt]
}

resource "google_firestore_field" "outbox_to" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "to"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_from]
}

resource "google_firestore_field" "outbox_reason" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "reason"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_to]
}

resource "google_firestore_field" "outbox_outcome" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "outcome"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_reason]
}

resource "google_firestore_field" "outbox_next_attempt" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "nextAttempt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_outcome]
}

resource "google_firestore_field" "outbox_seq" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "seq"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_next_attempt]
}

resource "google_firestore_field" "outbox_dead_letter" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "deadLetter"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_seq]
}

resource "google_firestore_field" "outbox_trace" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "trace"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_dead_letter]
}

resource "google_firestore_field" "outbox_tries" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "tries"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_trace]
}

resource "google_firestore_field" "outbox_event_published" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "eventPublished"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_tries]
}
