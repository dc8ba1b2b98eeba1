# Quotas (docs/tenants.md): the sweeper's admit duty reads the tasks
# waiting for a run slot, per due shard, lowest rank first (waitRank: the
# time a task waits from, later by 5 minutes for each priority level below
# the highest; docs/contract.md §12, "Priority").
resource "google_firestore_index" "tasks_due_shard_state_wait_rank" {
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
    field_path = "waitRank"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.schedules_tenant_id_schedule_id]
}

# ... and, every 10 minutes (quota.OldestEvery), oldest first: tasks a build before ranks
# left waiting have no waitRank.
resource "google_firestore_index" "tasks_due_shard_state_waiting_since" {
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
    field_path = "waitingSince"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_state_wait_rank]
}

# Steadily increasing timestamps: the wait's start, shown; its rank,
# queried only through the index above.
resource "google_firestore_field" "tasks_waiting_since" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "waitingSince"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_scheduled_fire_at]
}

resource "google_firestore_field" "tasks_wait_rank" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "waitRank"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_waiting_since]
}
