# The task-token signing key ring (SERVO_TOKEN_KEYS), in Secret Manager, in
# the form `servo keys` reads and writes (package auth, Ring):
#
#   {"active":"k2","keys":{"k1":"<base64 32 bytes>","k2":"<base64 32 bytes>"},
#    "meta":{"k1":{"createdAt":"…","deactivatedAt":"…"},"k2":{"createdAt":"…","activatedAt":"…"}}}
#
# Each kid's key is generated once by random_bytes and kept in the Terraform
# state (never in an output): adding a kid adds a key and leaves the others
# alone, so rotation is three applies (README.md, "Rotate the signing key").
# Every change of ids or active writes a new secret version; the functions
# mount "latest" and re-read the secret (SERVO_TOKEN_KEYS_SECRET), so no
# redeploy is needed.
#
# With managed_externally the ring belongs to `servo keys --secret`: this
# module creates the secret only and writes no version.

locals {
  ids = var.managed_externally ? [] : var.ids

  # The longest a task token lives (package auth): a key that stopped
  # signing less than this ago may still verify live tokens.
  min_grace = "2h"
  # A retry's token is valid from its delivery, up to 24 h after signing
  # (docs/operations.md, "Rotate the task-token keys"): servo keys retire's
  # default grace.
  default_grace = "26h5m"
}

resource "random_bytes" "key" {
  for_each = toset(local.ids)

  length = 32
}

# When each kid entered the ring: the plan's time, recorded once.
resource "terraform_data" "created" {
  for_each = toset(local.ids)

  input = plantimestamp()

  lifecycle {
    ignore_changes = [input]
  }
}

# The current activation: which kid, when it became active, and the ring at
# that moment. Recorded once per change of the active kid (a new active kid
# replaces it); between activations the recorded value stays as it was,
# which is how a later plan knows which keys were in the ring when the
# previous key stopped signing.
resource "terraform_data" "activation" {
  count = var.managed_externally ? 0 : 1

  input = {
    kid = var.active
    at  = plantimestamp()
    ids = var.ids
  }
  triggers_replace = [var.active]

  lifecycle {
    ignore_changes = [input]
  }
}

resource "google_secret_manager_secret" "keys" {
  project   = var.project_id
  secret_id = var.secret_id

  replication {
    auto {}
  }

  deletion_protection = var.deletion_protection
}

locals {
  activation = one(terraform_data.activation[*].input)
  # Keys in the ring at the current activation that this plan drops.
  dropped = local.activation == null ? [] : [for id in local.activation.ids : id if !contains(var.ids, id)]
  # True while a key that stopped signing at the current activation may
  # still verify live tokens.
  within_min_grace = local.activation == null ? false : timecmp(plantimestamp(), timeadd(local.activation.at, local.min_grace)) < 0
  within_default   = local.activation == null ? false : timecmp(plantimestamp(), timeadd(local.activation.at, local.default_grace)) < 0
  # This plan activates a kid that was in the ring before and leaves it
  # alone in the ring: the key it replaces was dropped in the same apply.
  activating_now = local.activation == null ? false : local.activation.at == plantimestamp()
  dropped_with_activation = (
    local.activating_now && length(var.ids) == 1 &&
    try(terraform_data.created[var.active].input != plantimestamp(), false)
  )
}

resource "google_secret_manager_secret_version" "keys" {
  count = var.managed_externally ? 0 : 1

  secret = google_secret_manager_secret.keys.id
  secret_data = jsonencode({
    active = var.active
    keys   = { for id in var.ids : id => random_bytes.key[id].base64 }
    # The history servo keys reads (auth.KeyMeta): every key but the active
    # one stopped signing at the latest by the current activation.
    meta = { for id in var.ids : id => merge(
      { createdAt = terraform_data.created[id].input },
      id == var.active ? { activatedAt = local.activation.at } : { deactivatedAt = local.activation.at },
    ) }
  })

  # Replacing the version (every rotation step) creates the new one first,
  # so the secret always has an enabled version.
  lifecycle {
    create_before_destroy = true

    precondition {
      condition     = var.allow_early_drop || length(local.dropped) == 0 || !local.within_min_grace
      error_message = "Refusing to drop signing key(s) ${join(", ", local.dropped)}: they signed tokens until ${local.activation.at}, when ${local.activation.kid} became active, and a task token lives up to ${local.min_grace}. Apply again after ${timeadd(local.activation.at, local.min_grace)} (better: after ${timeadd(local.activation.at, local.default_grace)}, so that retries' tokens stay valid), or set signing_keys.allow_early_drop = true to drop them now (a compromised key; its tokens then fail)."
    }
    precondition {
      condition     = var.allow_early_drop || !local.dropped_with_activation
      error_message = "Refusing to activate ${var.active} and drop the key it replaces in the same apply: tokens signed with the old key would fail at once. Activate first (keep both ids), drop the old key in a later apply (README.md, \"Rotate the signing key\"), or set signing_keys.allow_early_drop = true."
    }
  }
}

# Dropping a key later than the token lifetime but before the retries'
# window (26 h 5 min) is allowed, and warned about.
check "signing_key_retire_grace" {
  assert {
    condition     = var.managed_externally || length(local.dropped) == 0 || !local.within_default
    error_message = "WARNING: dropping signing key(s) ${join(", ", local.dropped)} less than ${local.default_grace} after ${try(local.activation.kid, "")} became active (${try(local.activation.at, "")}): the tokens of retries delivered later than the key stopped signing may still carry it, and those attempts will fail with 401."
  }
}

# Earlier versions had exactly one version resource (no count).
moved {
  from = google_secret_manager_secret_version.keys
  to   = google_secret_manager_secret_version.keys[0]
}
