# Schedules (docs/contract.md §16): the sweeper's schedule duty reads the
# schedules due to fire, per due shard; listings read a tenant's by id.
resource "google_firestore_index" "schedules_due_shard_due_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"

  fields {
    field_path = "dueShard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "dueAt"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.tasks_due_shard_own_run_tenant_id_run_id_desc]
}

resource "google_firestore_index" "schedules_tenant_id_schedule_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"

  fields {
    field_path = "tenantId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "scheduleId"
    order      = "ASCENDING"
  }

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_index.schedules_due_shard_due_at]
}

# Large, repeated or steadily increasing values no query reads alone.
resource "google_firestore_field" "outbox_priority" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "priority"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_event_published]
}

resource "google_firestore_field" "schedules_task" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "task"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_priority]
}

resource "google_firestore_field" "schedules_recent" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "recent"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_task]
}

resource "google_firestore_field" "schedules_pending" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "pending"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_recent]
}

resource "google_firestore_field" "schedules_active" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "active"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_pending]
}

resource "google_firestore_field" "schedules_buffered" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "buffered"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_active]
}

resource "google_firestore_field" "schedules_cancel" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "cancel"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_buffered]
}

resource "google_firestore_field" "schedules_note" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "note"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_cancel]
}

resource "google_firestore_field" "schedules_next_fire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "nextFireAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_note]
}

resource "google_firestore_field" "schedules_due_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "schedules"
  field      = "dueAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_next_fire_at]
}

resource "google_firestore_field" "tasks_schedule_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "scheduleId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.schedules_due_at]
}

resource "google_firestore_field" "tasks_scheduled_fire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"
  field      = "scheduledFireAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_schedule_id]
}

resource "google_firestore_field" "outbox_schedule_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "scheduleId"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.tasks_scheduled_fire_at]
}

resource "google_firestore_field" "outbox_scheduled_fire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "scheduledFireAt"

  index_config {}

  timeouts {
    create = "2h"
    update = "2h"
    delete = "1h"
  }

  depends_on = [google_firestore_field.outbox_schedule_id]
}
