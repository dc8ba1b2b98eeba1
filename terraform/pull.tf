# Pull pools (package pull): workers that cannot take inbound requests claim
# attempts over outbound HTTPS from the claim function (ServoClaim).
#
# Per pool: a topic the enqueue path publishes attempts to, a pull
# subscription the claim function receives from (acknowledging a message
# only after the claim commits in Firestore), a dead-letter topic with an
# inbox subscription for messages no claim could settle, and the invoker
# role on the claim function for the pool's service accounts only. The
# grants to Servo's own accounts are rows of local.grants (iam.tf, targets
# pool-topics and pool-subscriptions); the ones to principals outside Servo
# (the pools' callers, the Pub/Sub service agent) are at the end of iam.tf.

variable "pull_pools" {
  description = <<-EOT
    Pull pools by name (tasks name them as "worker", like push workers).
    service_accounts are the identities whose workers may claim (invoker
    role on the claim function, and checked by the function against the
    caller's verified ID token). ack_deadline_seconds is how long a message
    a crashed claim received stays hidden; max_delivery_attempts how often
    a message is delivered before it goes to the pool's dead-letter topic
    (Servo's sweeper re-drives the task anyway); message_retention how long
    an unclaimed message is kept. tenants, when set, binds the pool to
    those tenants: a task of another tenant submitted to it is refused
    (403), so its members only ever claim those tenants' tasks; empty, the
    pool takes every tenant's tasks and its members act for all of them.
  EOT
  type = map(object({
    service_accounts      = list(string)
    tenants               = optional(list(string), [])
    ack_deadline_seconds  = optional(number, 60)
    max_delivery_attempts = optional(number, 20)
    message_retention     = optional(string, "604800s")
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.pull_pools) : can(regex("^[a-z][a-z0-9-]{0,13}[a-z0-9]$", name))])
    error_message = "Pull pool names must be 2-15 lowercase letters, digits and hyphens, starting with a letter."
  }
  validation {
    condition = alltrue([for p in values(var.pull_pools) :
      length(p.service_accounts) > 0 &&
      alltrue([for sa in p.service_accounts : can(regex("^[^@\\s]+@[^@\\s]+\\.[a-z]+$", sa))])
    ])
    error_message = "Every pull pool needs service_accounts: at least one e-mail address of the identities allowed to claim."
  }
  validation {
    condition = alltrue([for p in values(var.pull_pools) :
      p.ack_deadline_seconds >= 10 && p.ack_deadline_seconds <= 600 &&
      p.max_delivery_attempts >= 5 && p.max_delivery_attempts <= 100 &&
      can(regex("^[0-9]+s$", p.message_retention)) &&
      try(tonumber(trimsuffix(p.message_retention, "s")) >= 600 && tonumber(trimsuffix(p.message_retention, "s")) <= 604800, false)
    ])
    error_message = "pull_pools: ack_deadline_seconds 10-600, max_delivery_attempts 5-100, message_retention \"600s\" to \"604800s\" (Pub/Sub's limits)."
  }
}

variable "claim_function" {
  description = "Sizing of the claim function. Its timeout must exceed the longest claim long-poll (60s)."
  type = object({
    memory          = optional(string, "512Mi")
    cpu             = optional(string, "1")
    timeout_seconds = optional(number, 120)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 20)
    concurrency     = optional(number, 80)
  })
  default = {}

  validation {
    condition = (
      can(regex("^[0-9]+(Mi|Gi|M|G)$", var.claim_function.memory)) &&
      can(regex("^([0-9]+(\\.[0-9]+)?|[0-9]+m)$", var.claim_function.cpu)) &&
      var.claim_function.timeout_seconds > 60 && var.claim_function.timeout_seconds <= 3600 &&
      var.claim_function.min_instances >= 0 && var.claim_function.max_instances >= 1 &&
      var.claim_function.min_instances <= var.claim_function.max_instances &&
      var.claim_function.concurrency >= 1 && var.claim_function.concurrency <= 1000
    )
    error_message = "claim_function: memory like \"512Mi\", cpu like \"1\", timeout_seconds 61-3600, 0 <= min_instances <= max_instances, max_instances >= 1, concurrency 1-1000."
  }
}

locals {
  claim_name = "${var.name_prefix}-claim"
  # The claim function's URL: the audience of the pool workers' ID tokens.
  claim_url = "https://${var.region}-${var.project_id}.cloudfunctions.net/${local.claim_name}"

  # SERVO_WORKERS entries of the pools (package enqueue: pull, serviceAccounts,
  # tenants; an empty list binds the pool to no tenant in particular).
  servo_pull_pools = {
    for name, p in var.pull_pools : name => {
      pull            = true
      serviceAccounts = p.service_accounts
      tenants         = p.tenants
    }
  }

  # Every (pool, caller) pair, for the claim function's invoker role.
  pool_callers = merge([
    for name, p in var.pull_pools : { for sa in p.service_accounts : "${name} ${sa}" => sa }
  ]...)
}

# The project's number, for the Pub/Sub service agent's address. No data
# source reads it (a plan must not call Google): when var.project_number is
# not given it comes from the signing-key secret's resource name, which
# Secret Manager reports as projects/NUMBER/secrets/ID once it exists.
locals {
  project_number = var.project_number != "" ? var.project_number : split("/", module.signing_keys.secret_name)[1]
}

# The Pub/Sub and Eventarc service agents, created explicitly and waited
# for before anything grants them a role or uses them (the dead-letter
# grants below; the sweeper's Eventarc trigger): Google otherwise creates
# them lazily, some time after their APIs are enabled, and a first apply
# that gets there first fails. The GA google provider has no resource for
# it (google_project_service_identity is google-beta only), so
# scripts/service-identity.sh calls gcloud once per agent, at creation,
# and waits service_identity_wait_seconds for IAM to see it.
# create_service_identities = false skips it (README.md, "First apply into
# an empty project").
resource "terraform_data" "service_identity" {
  for_each = var.create_service_identities ? toset(["pubsub.googleapis.com", "eventarc.googleapis.com"]) : toset([])

  input = { service = each.key, project = var.project_id }

  provisioner "local-exec" {
    interpreter = ["bash", "-c"]
    command     = "${path.module}/scripts/service-identity.sh ${each.key} ${var.project_id} ${var.service_identity_wait_seconds}"
  }

  depends_on = [google_project_service.apis]
}

# The pool's topic and pull subscription share the id
# <name_prefix>-pool-NAME (package pull: pull.ResourceID, with the functions'
# SERVO_NAME_PREFIX), so two environments in one project keep their pools
# apart. The pool's dead-letter topic and inbox carry the prefix too.
resource "google_pubsub_topic" "pool" {
  for_each = var.pull_pools

  project = var.project_id
  name    = "${var.name_prefix}-pool-${each.key}"
  labels  = { servo = "pull-pool" }

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "pool_dead_letter" {
  for_each = var.pull_pools

  project = var.project_id
  name    = "${var.name_prefix}-pool-${each.key}-dead-letter"
  labels  = { servo = "pull-pool" }

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_subscription" "pool" {
  for_each = var.pull_pools

  project                    = var.project_id
  name                       = "${var.name_prefix}-pool-${each.key}"
  topic                      = google_pubsub_topic.pool[each.key].id
  ack_deadline_seconds       = each.value.ack_deadline_seconds
  message_retention_duration = each.value.message_retention
  retain_acked_messages      = false

  # A pool's subscription lives as long as the pool, idle or not.
  expiration_policy {
    ttl = ""
  }
  # A message handed back (a claim whose transaction failed) comes back
  # after a short backoff.
  retry_policy {
    minimum_backoff = "1s"
    maximum_backoff = "60s"
  }
  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.pool_dead_letter[each.key].id
    max_delivery_attempts = each.value.max_delivery_attempts
  }
}

# Dead letters are kept until someone reads them.
resource "google_pubsub_subscription" "pool_dead_letter_inbox" {
  for_each = var.pull_pools

  project                    = var.project_id
  name                       = "${var.name_prefix}-pool-${each.key}-dead-letter-inbox"
  topic                      = google_pubsub_topic.pool_dead_letter[each.key].id
  message_retention_duration = "604800s"

  expiration_policy {
    ttl = ""
  }
}

output "claim_url" {
  description = "The claim function's URL: pull-pool workers claim at <claim_url>/v1/pools/NAME/claim with an ID token for this audience."
  value       = local.claim_url
}
