# The task-token signing key ring (SERVO_TOKEN_KEYS), in Secret Manager:
#
#   {"active":"k2","keys":{"k1":"<base64 32 bytes>","k2":"<base64 32 bytes>"}}
#
# Each kid's key is generated once by random_bytes and kept in the Terraform
# state (never in an output): adding a kid adds a key and leaves the others
# alone, so rotation is three applies (README.md, "Rotate the signing key").
# Every change of ids or active writes a new secret version; the functions
# mount that version number, so each change rolls out as a new revision.

resource "random_bytes" "key" {
  for_each = toset(var.ids)

  length = 32
}

resource "google_secret_manager_secret" "keys" {
  project   = var.project_id
  secret_id = var.secret_id

  replication {
    auto {}
  }

  deletion_protection = var.deletion_protection
}

resource "google_secret_manager_secret_version" "keys" {
  secret = google_secret_manager_secret.keys.id
  secret_data = jsonencode({
    active = var.active
    keys   = { for id in var.ids : id => random_bytes.key[id].base64 }
  })

  # Replacing the version (every rotation step) creates the new one first,
  # so the functions switch to it before the old one is destroyed.
  lifecycle {
    create_before_destroy = true
  }
}
