# Tenants: the control API's access policy and the per-tenant and
# per-worker quotas (docs/tenants.md). Both reach the functions as JSON in
# their environment (SERVO_ACCESS, SERVO_QUOTAS); neither needs a role.

variable "access_policy" {
  description = "Control API access policy: principal (an e-mail, or \"*\" for any caller IAM admits) to tenant (or \"*\" for every tenant) to role: viewer (get, list, events, usage), submitter (+ submit) or operator (+ cancel, rerun). Empty leaves the API open to every caller IAM admits."
  type        = map(map(string))
  default     = {}

  validation {
    condition = alltrue([for who, tenants in var.access_policy :
      (who == "*" || can(regex("^[^@[:space:]]+@[^@[:space:]]+$", who))) && length(tenants) > 0 &&
      alltrue([for tenant, role in tenants : length(tenant) >= 1 && length(tenant) <= 128 && contains(["viewer", "submitter", "operator"], role)])
    ])
    error_message = "access_policy: each principal must be an e-mail or \"*\" with at least one tenant; each tenant 1-128 characters (or \"*\"); each role viewer, submitter or operator."
  }
}

variable "tenant_quotas" {
  description = "Limits per tenant (\"*\" for every tenant not named): max_running (tasks RUNNING or CANCELLING, or enqueued and not yet started; more wait QUEUED) and max_queued (tasks PENDING or QUEUED; more are refused with 429). 0 is unlimited. peak_rate (tasks/s, 0 to 50000) sizes the tenant's counter shards to that rate (5 shards per task/s, at most its smallest limit / 2; docs/tenants.md); 0 keeps quota_shards. retention_days (0: retention_days's default; else at least 30) is how long the tenant's ended tasks are kept."
  type = map(object({
    max_running    = optional(number, 0)
    max_queued     = optional(number, 0)
    peak_rate      = optional(number, 0)
    retention_days = optional(number, 0)
  }))
  default = {}

  validation {
    condition = alltrue([for name, l in var.tenant_quotas :
      length(name) >= 1 && length(name) <= 128 && l.max_running >= 0 && l.max_queued >= 0 &&
      floor(l.max_running) == l.max_running && floor(l.max_queued) == l.max_queued &&
      l.peak_rate >= 0 && l.peak_rate <= 50000 &&
      (l.retention_days == 0 || l.retention_days >= 30) && floor(l.retention_days) == l.retention_days
    ])
    error_message = "tenant_quotas: names 1-128 characters; max_running and max_queued whole numbers ≥ 0 (0 is unlimited); peak_rate from 0 to 50000 tasks/s; retention_days 0 (the default) or a whole number ≥ 30 (the idempotency window)."
  }
}

variable "worker_quotas" {
  description = "Limits per worker name (a key of workers), as tenant_quotas: max_running and max_queued, 0 unlimited, peak_rate (tasks/s) sizing its counter shards. Tenants sharing a limited worker take its free run slots in turn; per_tenant (max_running, max_queued) is each tenant's share of the worker, so that one tenant cannot take it all."
  type = map(object({
    max_running = optional(number, 0)
    max_queued  = optional(number, 0)
    peak_rate   = optional(number, 0)
    per_tenant = optional(object({
      max_running = optional(number, 0)
      max_queued  = optional(number, 0)
    }))
  }))
  default = {}

  validation {
    condition = alltrue([for name, l in var.worker_quotas :
      name != "*" && length(name) >= 1 && length(name) <= 128 && l.max_running >= 0 && l.max_queued >= 0 &&
      floor(l.max_running) == l.max_running && floor(l.max_queued) == l.max_queued && l.peak_rate >= 0 && l.peak_rate <= 50000 &&
      (l.per_tenant == null ? true : (l.per_tenant.max_running >= 0 && l.per_tenant.max_queued >= 0 &&
      floor(l.per_tenant.max_running) == l.per_tenant.max_running && floor(l.per_tenant.max_queued) == l.per_tenant.max_queued))
    ])
    error_message = "worker_quotas: names are worker names (not \"*\"); max_running and max_queued (and per_tenant's) whole numbers ≥ 0 (0 is unlimited); peak_rate from 0 to 50000 tasks/s."
  }
}

variable "iap_audience" {
  description = "When the API and its dashboard are deployed behind Identity-Aware Proxy: the audience of IAP's signed header (/projects/NUMBER/global/backendServices/ID), accepted as the caller's identity (SERVO_IAP_AUDIENCE). Empty: not behind IAP."
  type        = string
  default     = ""

  validation {
    condition     = var.iap_audience == "" || can(regex("^/projects/[0-9]+/(global/backendServices/[0-9]+|apps/[a-z][a-z0-9-]*)$", var.iap_audience))
    error_message = "iap_audience: empty, /projects/NUMBER/global/backendServices/ID or /projects/NUMBER/apps/PROJECT_ID."
  }
}

variable "quota_shards" {
  description = "Most counter shards per limited tenant or worker (a scope uses at most its smallest limit); more shards spread the counter writes of a busy scope."
  type        = number
  default     = 4

  validation {
    condition     = var.quota_shards >= 1 && var.quota_shards <= 64 && floor(var.quota_shards) == var.quota_shards
    error_message = "quota_shards must be a whole number from 1 to 64."
  }
}

locals {
  # SERVO_ACCESS (package auth); empty: open.
  servo_access = length(var.access_policy) == 0 ? "" : jsonencode({ principals = var.access_policy })

  # SERVO_QUOTAS (package quota); empty: no quota.
  servo_quotas = length(var.tenant_quotas) + length(var.worker_quotas) == 0 ? "" : jsonencode({
    tenants = { for name, l in var.tenant_quotas : name => merge(
      { maxRunning = l.max_running, maxQueued = l.max_queued, peakRate = l.peak_rate },
      l.retention_days == 0 ? {} : { retentionDays = l.retention_days },
    ) }
    workers = { for name, l in var.worker_quotas : name => merge(
      { maxRunning = l.max_running, maxQueued = l.max_queued, peakRate = l.peak_rate },
      l.per_tenant == null ? {} : { perTenant = { maxRunning = l.per_tenant.max_running, maxQueued = l.per_tenant.max_queued } },
    ) }
    shards = var.quota_shards
  })
}
