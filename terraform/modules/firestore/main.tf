# Servo's state: one Firestore database in native mode, the composite
# indexes its queries need and the TTL policies that expire old documents.
#
# The indexes and TTL fields are exactly store.Indexes and store.TTLFields
# (store/indexes.go); deploy/terraform_test.go fails when the two differ, so
# change both together. Each index is spelled out (no for_each) so the test
# reads what is deployed.

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

# Sweeper: leases past due (RUNNING, CANCELLING).
resource "google_firestore_index" "tasks_state_lease_expires_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "leaseExpiresAt"
    order      = "ASCENDING"
  }
}

# Sweeper: cancel grace periods past due (CANCELLING).
resource "google_firestore_index" "tasks_state_cancel_deadline" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "cancelDeadline"
    order      = "ASCENDING"
  }
}

# Sweeper: dispatches to check (PENDING, QUEUED).
resource "google_firestore_index" "tasks_state_dispatch_check_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "dispatchCheckAt"
    order      = "ASCENDING"
  }
}

# Sweeper: task deadlines past due (every non-terminal state).
resource "google_firestore_index" "tasks_state_deadline" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "tasks"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "deadline"
    order      = "ASCENDING"
  }
}

# Publisher re-drive: undelivered events older than the grace period.
resource "google_firestore_index" "outbox_delivered_created_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"

  fields {
    field_path = "delivered"
    order      = "ASCENDING"
  }
  fields {
    field_path = "createdAt"
    order      = "ASCENDING"
  }
}

# servo runs --tenant: a tenant's runs, newest first.
resource "google_firestore_index" "runs_tenant_id_run_id" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "runs"

  fields {
    field_path = "tenantId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "runId"
    order      = "DESCENDING"
  }
}

# --- TTL policies (store.TTLFields) ----------------------------------------
#
# Firestore deletes a document some time after the timestamp in its TTL
# field. The empty index_config exempts the field from single-field
# indexing: no query filters on it, and an indexed, steadily increasing
# timestamp would only add write cost and hotspots.

resource "google_firestore_field" "outbox_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "outbox"
  field      = "expireAt"

  index_config {}
  ttl_config {}
}

resource "google_firestore_field" "idempotency_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = "idempotency"
  field      = "expireAt"

  index_config {}
  ttl_config {}
}
