# Inputs of the Servo root module. Every variable has a type and a
# description (deploy/terraform_test.go checks), and every one that is not a
# plain bool is validated here so that a typo fails at plan time, not halfway
# through an apply.

variable "project_id" {
  description = "ID of the Google Cloud project Servo is deployed into (it should be dedicated to Servo, or at least to one team)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project ID: 6-30 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "project_number" {
  description = "The project's number, for the Pub/Sub service agent's e-mail (service-NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com). Empty: taken from the signing-key secret's resource name (projects/NUMBER/...) once it exists, so the grants to the agent are known only after the apply creates the secret."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^[0-9]*$", var.project_number))
    error_message = "project_number must be the project's number (digits only), or empty."
  }
}

variable "create_service_identities" {
  description = "Create the Pub/Sub and Eventarc service agents explicitly at the first apply (scripts/service-identity.sh, with gcloud authenticated as the principal applying Terraform) and wait for them before granting them roles. false: create them yourself first (gcloud beta services identity create --service=pubsub.googleapis.com and eventarc.googleapis.com)."
  type        = bool
  default     = true
}

variable "service_identity_wait_seconds" {
  description = "Seconds to wait after creating each service agent, for IAM to propagate it (once, at the first apply)."
  type        = number
  default     = 60

  validation {
    condition     = var.service_identity_wait_seconds >= 0 && var.service_identity_wait_seconds <= 600 && floor(var.service_identity_wait_seconds) == var.service_identity_wait_seconds
    error_message = "service_identity_wait_seconds must be a whole number of seconds from 0 to 600."
  }
}

variable "api_enable_wait_seconds" {
  description = "Seconds each API waits after Terraform enables it, before anything that uses it is created (README.md, \"First apply into an empty project\"): a just-enabled API can still answer SERVICE_DISABLED for a while. Only when an API is enabled by this module (the first apply, or one that adds an API); 0: no wait."
  type        = number
  default     = 60

  validation {
    condition     = var.api_enable_wait_seconds >= 0 && var.api_enable_wait_seconds <= 600 && floor(var.api_enable_wait_seconds) == var.api_enable_wait_seconds
    error_message = "api_enable_wait_seconds must be a whole number of seconds from 0 to 600."
  }
}

variable "iam_propagation_wait_seconds" {
  description = "Seconds to wait after the IAM grants of iam.tf are made, before the functions are built and deployed (IAM changes typically propagate in 2 minutes, sometimes 7 or more). Only when the table of grants (local.grants) changes; 0: no wait."
  type        = number
  default     = 120

  validation {
    condition     = var.iam_propagation_wait_seconds >= 0 && var.iam_propagation_wait_seconds <= 900 && floor(var.iam_propagation_wait_seconds) == var.iam_propagation_wait_seconds
    error_message = "iam_propagation_wait_seconds must be a whole number of seconds from 0 to 900."
  }
}

variable "region" {
  description = "Region of the functions, worker services, Cloud Tasks queues, Cloud Scheduler job, Artifact Registry repository and source bucket."
  type        = string
  default     = "us-central1"

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Google Cloud region such as us-central1 or europe-west1."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name Servo creates (service accounts, functions, queues, services). Keep it short: service account IDs are limited to 30 characters."
  type        = string
  default     = "servo"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,10}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3-12 lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen."
  }
}

variable "deletion_protection" {
  description = "Protect the worker services, the Firestore database and the signing-key secret from deletion. Set to false (and apply) before terraform destroy."
  type        = bool
  default     = true
}

# --- Firestore -----------------------------------------------------------

variable "firestore_location" {
  description = "Location of the Firestore database (a multi-region such as nam5 or eur3, or a region). It cannot be changed after creation."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*[0-9]$", var.firestore_location))
    error_message = "firestore_location must be a Firestore location such as nam5, eur3 or europe-west1."
  }
}

variable "firestore_database" {
  description = "Firestore database ID (native mode). Passed to the functions as SERVO_FIRESTORE_DATABASE."
  type        = string
  default     = "(default)"

  validation {
    condition     = var.firestore_database == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.firestore_database))
    error_message = "firestore_database must be \"(default)\" or 4-63 lowercase letters, digits and hyphens, starting with a letter."
  }
}

# --- Pub/Sub -------------------------------------------------------------

variable "events_topic" {
  description = "Pub/Sub topic ID of task transition events (SERVO_EVENTS_TOPIC). Default: \"<name_prefix>-task-events\"."
  type        = string
  default     = null

  validation {
    condition     = var.events_topic == null || (can(regex("^[A-Za-z][A-Za-z0-9._~+%-]{2,254}$", coalesce(var.events_topic, "x"))) && !startswith(coalesce(var.events_topic, "x"), "goog"))
    error_message = "events_topic must be a Pub/Sub topic ID: 3-255 characters, starting with a letter, not with \"goog\"."
  }
}

variable "dead_letter_topic" {
  description = "Pub/Sub topic ID of dead letters: tasks that failed for good (SERVO_DEAD_LETTER_TOPIC). Default: \"<name_prefix>-dead-letter\"."
  type        = string
  default     = null

  validation {
    condition     = var.dead_letter_topic == null || (can(regex("^[A-Za-z][A-Za-z0-9._~+%-]{2,254}$", coalesce(var.dead_letter_topic, "x"))) && !startswith(coalesce(var.dead_letter_topic, "x"), "goog"))
    error_message = "dead_letter_topic must be a Pub/Sub topic ID: 3-255 characters, starting with a letter, not with \"goog\"."
  }
}

variable "sweep_topic" {
  description = "Pub/Sub topic ID Cloud Scheduler publishes sweep ticks to; it triggers the sweeper function. Default: \"<name_prefix>-sweep\"."
  type        = string
  default     = null

  validation {
    condition     = var.sweep_topic == null || (can(regex("^[A-Za-z][A-Za-z0-9._~+%-]{2,254}$", coalesce(var.sweep_topic, "x"))) && !startswith(coalesce(var.sweep_topic, "x"), "goog"))
    error_message = "sweep_topic must be a Pub/Sub topic ID: 3-255 characters, starting with a letter, not with \"goog\"."
  }
}

variable "topic_message_retention" {
  description = "How long the events and dead-letter topics retain messages even without a subscription, so that a consumer created later can seek back (10 minutes to 31 days, in seconds with an \"s\" suffix). Default a day: Pub/Sub bills the retained bytes ($0.27 per GiB-month), and a task's recent transitions stay readable from the API (GET /v1/tasks/{id}/events) as long as the task is kept."
  type        = string
  default     = "86400s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.topic_message_retention)) && try(tonumber(trimsuffix(var.topic_message_retention, "s")) >= 600 && tonumber(trimsuffix(var.topic_message_retention, "s")) <= 2678400, false)
    error_message = "topic_message_retention must be between \"600s\" and \"2678400s\"."
  }
}

# --- Sweeper and timers --------------------------------------------------

variable "sweep_schedule" {
  description = "Cron schedule (UTC) of the Cloud Scheduler job that publishes a sweep tick. Once a minute is the most Cloud Scheduler allows; the sweeper sweeps several times per tick (sweep_every)."
  type        = string
  default     = "* * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.sweep_schedule))) == 5
    error_message = "sweep_schedule must be a five-field cron expression, e.g. \"* * * * *\"."
  }
}

variable "sweep_early_end" {
  description = "End a sweeper invocation after a pass that finds nothing due before its window's end (SERVO_SWEEP_EARLY_END): at zero traffic an invocation is one pass, about a second, instead of 55 s. false sweeps for the whole window."
  type        = bool
  default     = true
}

variable "trace_sample_ratio" {
  description = "Share of traces exported in full to Cloud Trace, chosen by trace id (SERVO_TRACE_SAMPLE_RATIO); every other trace is exported only when a span failed or its request took trace_slow or longer. 0.01: a hundredth of the spans of healthy traffic (docs/operations.md, \"Trace sampling\")."
  type        = number
  default     = 0.01

  validation {
    condition     = var.trace_sample_ratio >= 0 && var.trace_sample_ratio <= 1
    error_message = "trace_sample_ratio must be from 0 to 1."
  }
}

variable "trace_slow" {
  description = "A request's duration from which its trace is always exported (SERVO_TRACE_SLOW), a Go duration such as 1s."
  type        = string
  default     = "1s"

  validation {
    condition     = can(regex("^([0-9]+(\\.[0-9]+)?(ms|s|m))+$", var.trace_slow))
    error_message = "trace_slow must be a positive Go duration such as \"1s\" or \"500ms\"."
  }
}

variable "log_heartbeats" {
  description = "Log every accepted heartbeat at INFO (SERVO_LOG_HEARTBEATS). false: accepted heartbeats are counted in the metric servo.callbacks and logged at DEBUG only; refused heartbeats and every other callback keep their line."
  type        = bool
  default     = false
}

variable "log_started" {
  description = "Log every accepted started callback at INFO (SERVO_LOG_STARTED). false: accepted started callbacks are counted in the metric servo.callbacks and logged at DEBUG only (the task's history and events record the start); refused ones keep their line, and every completed callback and submit logs one."
  type        = bool
  default     = false
}

variable "exclude_ok_request_logs" {
  description = "Exclude from Cloud Logging the request logs Cloud Run writes for the callbacks function's successful requests and the api function's successful submits (POST /v1/tasks and /v1/tasks:batch; HTTP status below 400): one ~1 KB entry per started, heartbeat, completed and submit, billed at ingestion. Servo's own lines (every completed and refused callback, every submit), every failed request's log and every other api request's log are kept; the metrics servo.callbacks and servo.submits count what the excluded entries would have shown. false keeps them."
  type        = bool
  default     = true
}

variable "sweep_every" {
  description = "Cadence of sweep passes within one sweeper invocation (SERVO_SWEEP_EVERY), a Go duration such as 15s."
  type        = string
  default     = "15s"

  validation {
    condition = can(regex("^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", var.sweep_every)) && try(
      sum([for m in regexall("([0-9.]+)(ms|s|m|h)", var.sweep_every) : tonumber(m[0]) * { ms = 0.001, s = 1, m = 60, h = 3600 }[m[1]]]) >= 1 &&
      sum([for m in regexall("([0-9.]+)(ms|s|m|h)", var.sweep_every) : tonumber(m[0]) * { ms = 0.001, s = 1, m = 60, h = 3600 }[m[1]]]) <= 55,
    false)
    error_message = "sweep_every must be a Go duration from 1s to 55s (the sweeper's window), such as \"15s\"."
  }
}

variable "start_timeout" {
  description = "Default time a task may stay PENDING/QUEUED before the sweeper re-drives it (SERVO_START_TIMEOUT), a Go duration such as 10m."
  type        = string
  default     = "10m"

  validation {
    condition = can(regex("^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", var.start_timeout)) && try(
      sum([for m in regexall("([0-9.]+)(ms|s|m|h)", var.start_timeout) : tonumber(m[0]) * { ms = 0.001, s = 1, m = 60, h = 3600 }[m[1]]]) >= 60 &&
      sum([for m in regexall("([0-9.]+)(ms|s|m|h)", var.start_timeout) : tonumber(m[0]) * { ms = 0.001, s = 1, m = 60, h = 3600 }[m[1]]]) <= 86400,
    false)
    error_message = "start_timeout must be a Go duration from 1m to 24h (a sweep tick is a minute apart), such as \"10m\"."
  }
}

variable "due_shards" {
  description = "Shards of the sweeper's due indexes (SERVO_DUE_SHARDS): each task gets one at creation, and each due query reads a group of up to 30 (dueShard IN [...]). 384 keeps the busiest index range (the leases') near 410 writes/s, under Firestore's 500, at twice the mean of 10 000 tasks/s with 1 000 000 running tasks and 30 s heartbeats (docs/scale.md), for 146 queries an idle sweep pass (about $2 a month, docs/cost.md); 50 000 tasks/s needs 2048 (docs/scale.md). Each query is billed as one document read even when it finds nothing. It may grow between deployments; lowered, the functions refuse to start until `servo migrate --due-shards N` has moved the data (tasks keep their shard)."
  type        = number
  default     = 384

  validation {
    condition     = var.due_shards >= 1 && var.due_shards <= 4096 && floor(var.due_shards) == var.due_shards
    error_message = "due_shards must be a whole number from 1 to 4096."
  }
}

# --- Token signing keys --------------------------------------------------

variable "signing_keys" {
  description = <<-EOT
    Key IDs (kid) of the task-token signing key ring and the one that signs.
    Terraform generates 32 random bytes per kid and stores the ring JSON
    {"active":"<kid>","keys":{"<kid>":"<base64>"}} in Secret Manager
    (SERVO_TOKEN_KEYS), with each key's history in "meta" (createdAt,
    activatedAt, deactivatedAt), as `servo keys` writes it. Rotate by adding
    a kid, then making it active, then removing the old one, one apply each
    (README.md); Terraform refuses to drop a key within 2 h (the longest
    token lifetime) of the activation that retired it.
    managed_externally = true leaves the ring to `servo keys --secret`:
    Terraform creates the secret and its grants but writes no version (ids
    and active are then ignored). allow_early_drop lets an apply drop a key
    that may still verify live tokens (a compromised key).
  EOT
  type = object({
    active             = optional(string, "k1")
    ids                = optional(list(string), ["k1"])
    managed_externally = optional(bool, false)
    allow_early_drop   = optional(bool, false)
  })
  default = {
    active = "k1"
    ids    = ["k1"]
  }

  validation {
    condition     = contains(var.signing_keys.ids, var.signing_keys.active)
    error_message = "signing_keys.active must be one of signing_keys.ids."
  }
  validation {
    condition     = length(var.signing_keys.ids) == length(distinct(var.signing_keys.ids)) && alltrue([for id in var.signing_keys.ids : can(regex("^[A-Za-z0-9_-]{1,32}$", id))])
    error_message = "signing_keys.ids must be distinct kids of 1-32 letters, digits, '_' or '-'."
  }
}

# --- Functions -----------------------------------------------------------

variable "functions_runtime" {
  description = "Cloud Functions Go runtime. go.mod declares go 1.26.x, so go126 or newer: an older runtime would have to download a newer toolchain during the build."
  type        = string
  default     = "go126"

  validation {
    condition     = can(regex("^go1(2[6-9]|[3-9][0-9])$", var.functions_runtime))
    error_message = "functions_runtime must be go126 or a newer Go runtime ID (go.mod requires Go 1.26)."
  }
}

variable "expected_lifecycles_per_second" {
  description = "The steady rate of task lifecycles (submit to end) the deployment expects, a second (a million a month is 0.38). It picks the api's and the callbacks' billing under functions_billing = \"auto\" (instance-based from each function's break-even on, local.billing_break_even) and sizes their max_instances (README.md, \"Billing\"). Default 1 (2.6 million a month): below both break-evens, so a deployment that declares nothing keeps request-based billing, which never bills an idle instance; declare yours."
  type        = number
  default     = 1

  validation {
    condition     = var.expected_lifecycles_per_second > 0 && var.expected_lifecycles_per_second <= 50000
    error_message = "expected_lifecycles_per_second must be above 0 and at most 50000 (the scale model's ceiling, docs/scale.md): a steady rate of task lifecycles a second, e.g. 0.38 for a million a month."
  }
}

variable "functions_billing" {
  description = "How Cloud Run bills the api and the callbacks: \"request\" (request-based: a fee a request, CPU and memory while a request is in flight; deployed as Cloud Functions), \"instance\" (instance-based: no fee a request, CPU and memory for each instance's whole life at lower prices; deployed as Cloud Run services built from the same source) or \"auto\" (the default: for each function, the cheaper at expected_lifecycles_per_second by docs/cost.md's model). Changing a function's billing replaces it (README.md, \"Billing\")."
  type        = string
  default     = "auto"

  validation {
    condition     = contains(["auto", "request", "instance"], var.functions_billing)
    error_message = "functions_billing must be \"auto\", \"request\" or \"instance\"."
  }
}

variable "functions" {
  description = "Sizing of the four functions (jobs: the jobs dispatch, jobs.tf; the defaults and why: README.md, \"Sizing\"). Concurrency above 1 needs at least one CPU. The sweeper's timeout must exceed its sweep window (55s by default in package zombie), and it runs one pass at a time (concurrency 1). The api's and the callbacks' max_instances default to null: sized from expected_lifecycles_per_second (README.md, \"Billing\"); a number overrides it."
  type = object({
    api = optional(object({
      memory          = optional(string, "512Mi")
      cpu             = optional(string, "1")
      timeout_seconds = optional(number, 60)
      min_instances   = optional(number, 0)
      max_instances   = optional(number) # null: sized from expected_lifecycles_per_second
      concurrency     = optional(number, 80)
    }), {})
    callbacks = optional(object({
      memory          = optional(string, "256Mi")
      cpu             = optional(string, "1")
      timeout_seconds = optional(number, 60)
      min_instances   = optional(number, 0)
      max_instances   = optional(number) # null: sized from expected_lifecycles_per_second
      concurrency     = optional(number, 80)
    }), {})
    sweeper = optional(object({
      memory          = optional(string, "256Mi")
      cpu             = optional(string, "0.333")
      timeout_seconds = optional(number, 120)
      min_instances   = optional(number, 0)
      max_instances   = optional(number, 2)
      concurrency     = optional(number, 1)
    }), {})
    jobs = optional(object({
      memory          = optional(string, "256Mi")
      cpu             = optional(string, "1")
      timeout_seconds = optional(number, 60)
      min_instances   = optional(number, 0)
      max_instances   = optional(number, 10)
      concurrency     = optional(number, 80)
    }), {})
  })
  default = {}

  validation {
    condition = alltrue([for f in [var.functions.api, var.functions.callbacks, var.functions.sweeper, var.functions.jobs] :
      can(regex("^[0-9]+(Mi|Gi|M|G)$", f.memory)) &&
      can(regex("^([0-9]+(\\.[0-9]+)?|[0-9]+m)$", f.cpu)) &&
      f.timeout_seconds >= 1 && f.timeout_seconds <= 3600 &&
      f.min_instances >= 0 && (f.max_instances == null || try(f.max_instances >= 1 && f.min_instances <= f.max_instances, false)) &&
      f.concurrency >= 1 && f.concurrency <= 1000
    ])
    error_message = "functions: memory like \"512Mi\", cpu like \"1\", timeout_seconds 1-3600, 0 <= min_instances <= max_instances, max_instances >= 1, concurrency 1-1000."
  }
  validation {
    condition     = var.functions.sweeper.timeout_seconds >= 60 && var.functions.sweeper.timeout_seconds <= 540
    error_message = "functions.sweeper.timeout_seconds must be 60-540: an event-driven function may run at most 540s, and one invocation sweeps for up to 55s."
  }
  validation {
    # Cloud Run refuses concurrency above 1 with less than one CPU.
    condition = alltrue([for f in [var.functions.api, var.functions.callbacks, var.functions.sweeper] :
      f.concurrency == 1 || (can(regex("^[0-9]+(\\.[0-9]+)?$", f.cpu)) && try(tonumber(f.cpu) >= 1, false))
    ])
    error_message = "functions: concurrency above 1 needs cpu of at least \"1\" (Cloud Run allows fractional CPU only with concurrency 1)."
  }
  validation {
    # Cloud Run: memory above 512Mi needs at least 0.5 CPU, above 1Gi at
    # least 1 CPU. (A malformed value is the first validation's error.)
    condition = alltrue([for f in [var.functions.api, var.functions.callbacks, var.functions.sweeper, var.functions.jobs] :
      try(
        (can(regex("m$", f.cpu)) ? tonumber(trimsuffix(f.cpu, "m")) / 1000 : tonumber(f.cpu)) >= 1 ||
        tonumber(regex("^[0-9]+", f.memory)) * (can(regex("G$|Gi$", f.memory)) ? 1024 : 1) <= (
          (can(regex("m$", f.cpu)) ? tonumber(trimsuffix(f.cpu, "m")) / 1000 : tonumber(f.cpu)) >= 0.5 ? 1024 : 512
        ),
      true)
    ])
    error_message = "functions: with less than one cpu, memory may be at most 512Mi below cpu \"0.5\" and at most 1Gi from \"0.5\" (Cloud Run's limits)."
  }
  validation {
    # One sweep at a time per instance: a pass is a sequence of duties.
    condition     = var.functions.sweeper.concurrency == 1
    error_message = "functions.sweeper.concurrency must be 1: each invocation sweeps for up to its window, one at a time."
  }
}

variable "api_invokers" {
  description = "IAM principals allowed to call the control API (roles/run.invoker on its service), e.g. [\"group:platform@example.com\", \"serviceAccount:ci@my-project.iam.gserviceaccount.com\"]. The control API is never public."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.api_invokers : can(regex("^(user|group|serviceAccount|domain|principal|principalSet):.+$", m))])
    error_message = "api_invokers must be IAM principals such as user:…, group:…, serviceAccount:…, domain:…; allUsers and allAuthenticatedUsers are refused."
  }
}

variable "function_source_dir" {
  description = "Directory zipped as the function source: the root of the Servo Go module (go.mod). Null means the parent of this module's directory. Relative paths are relative to the directory terraform runs in."
  type        = string
  default     = null

  validation {
    condition     = var.function_source_dir == null || try(length(var.function_source_dir) > 0, false)
    error_message = "function_source_dir must be null or a non-empty path."
  }
}

variable "function_source_excludes" {
  description = "Paths left out of the function source zip. Each is either a name at the source root (file or directory, no wildcards) or \"**/<glob>\" matching a file or directory name at any depth. Test files are excluded on purpose: the Go buildpack parses every .go file at the root, tests included, and insists on one package."
  type        = list(string)
  default = [
    ".git",
    ".github",
    ".ci",
    "terraform",
    "deploy",
    "examples",
    "cloudbuild.yaml",
    "**/*_test.go",
    "**/testdata",
    "**/.terraform",
  ]

  validation {
    condition     = alltrue([for p in var.function_source_excludes : can(regex("^([^/*?\\[]+|\\*\\*/[^/]+)$", p))])
    error_message = "function_source_excludes entries must be a root-level name without wildcards or \"**/<glob>\" (no further slashes)."
  }
}

# --- Workers -------------------------------------------------------------

variable "artifact_repository" {
  description = "ID of the Artifact Registry Docker repository for worker images (and the function images Cloud Build produces). Default: name_prefix."
  type        = string
  default     = null

  validation {
    condition     = var.artifact_repository == null || can(regex("^[a-z][a-z0-9-]{0,61}[a-z0-9]$", coalesce(var.artifact_repository, "x")))
    error_message = "artifact_repository must be 2-63 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "workers" {
  description = <<-EOT
    Workers by name: each gets a Cloud Run service (its own runtime service
    account, ingress from anywhere but invocable only by the Cloud Tasks
    invoker account) and Cloud Tasks queues. Queue retries are transport
    retries of one attempt's push; Servo's own retry policy decides new
    attempts. Durations are seconds with an "s" suffix.
    queue.max_dispatches_per_second is the worker's declared peak dispatch
    rate (default 10, at most 50000): a queue dispatches at most 500 a
    second, so the worker gets N = ceil(rate / 500) queues, servo-<name>
    then servo-<name>-q1 ... -q(N-1), each at rate / N, and Servo spreads
    the attempts over them (SERVO_WORKERS maxDispatchesPerSecond). Lowering
    the rate so that N shrinks deletes the highest queues with the tasks
    they hold (re-driven after their start timeout), and a deleted queue's
    name cannot be reused for about 7 days. queue.max_concurrent_dispatches
    is the worker's total over its queues (each gets its share, at most
    5000); it defaults to max_instances x concurrency (what the service can
    take at once); more is flagged by a check, since Cloud Run answers the
    excess with 429 and Cloud Tasks retries it. Each Cloud Task's dispatch
    deadline is at most timeout_seconds (Servo reads it from SERVO_WORKERS).
  EOT
  type = map(object({
    image           = string
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    timeout_seconds = optional(number, 900)
    concurrency     = optional(number, 1)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
    env             = optional(map(string), {})
    queue = optional(object({
      max_attempts              = optional(number, 10)
      min_backoff               = optional(string, "1s")
      max_backoff               = optional(string, "300s")
      max_doublings             = optional(number, 5)
      max_dispatches_per_second = optional(number, 10)
      max_concurrent_dispatches = optional(number) # the worker's total; default: max_instances x concurrency
    }), {})
  }))
  default = {}

  validation {
    # A queue must not dispatch more at once than its worker's instances can
    # take: Cloud Run would answer 429 and Cloud Tasks retry.
    condition = alltrue([for w in values(var.workers) :
      try(w.queue.max_concurrent_dispatches == null, true) || try(w.max_instances * w.concurrency >= w.queue.max_concurrent_dispatches, false)
    ])
    error_message = "A worker's queue.max_concurrent_dispatches is above its max_instances x concurrency: Cloud Run would answer 429 and Cloud Tasks retry. Raise max_instances or concurrency, or lower (or drop: it defaults to max_instances x concurrency) queue.max_concurrent_dispatches."
  }
  validation {
    # Every queue of a worker dispatches at least one task at a time.
    condition = alltrue([for w in values(var.workers) :
      try(coalesce(w.queue.max_concurrent_dispatches, w.max_instances * w.concurrency) >= ceil(w.queue.max_dispatches_per_second / 500), true)
    ])
    error_message = "A worker's queue.max_concurrent_dispatches (default max_instances x concurrency) is below its number of queues, ceil(queue.max_dispatches_per_second / 500): each queue needs at least one dispatch at a time."
  }
  validation {
    # A worker's extra queues are servo-<name>-q1, ...: no other worker may
    # be named so.
    condition = alltrue(flatten([for name, w in var.workers :
      [for i in range(1, max(1, try(ceil(w.queue.max_dispatches_per_second / 500), 1))) : !contains(keys(var.workers), "${name}-q${i}")]
    ]))
    error_message = "A worker is named like another worker's extra queue (<name>-q1, <name>-q2, ... when that worker's queue.max_dispatches_per_second is above 500): rename it."
  }
  validation {
    condition     = alltrue([for name in keys(var.workers) : can(regex("^[a-z][a-z0-9-]{0,13}[a-z0-9]$", name))])
    error_message = "Worker names must be 2-15 lowercase letters, digits and hyphens, starting with a letter (they become service account, service and queue names)."
  }
  validation {
    condition = alltrue([for w in values(var.workers) :
      length(w.image) > 0 &&
      can(regex("^[0-9]+(Mi|Gi|M|G)$", w.memory)) &&
      can(regex("^([0-9]+(\\.[0-9]+)?|[0-9]+m)$", w.cpu)) &&
      w.timeout_seconds >= 1 && w.timeout_seconds <= 3600 &&
      w.concurrency >= 1 && w.concurrency <= 1000 &&
      w.min_instances >= 0 && w.max_instances >= 1 && w.min_instances <= w.max_instances &&
      alltrue([for k in keys(w.env) : can(regex("^[A-Za-z_][A-Za-z0-9_]*$", k))])
    ])
    error_message = "Each worker needs an image; memory like \"512Mi\"; cpu like \"1\"; timeout_seconds 1-3600; concurrency 1-1000; 0 <= min_instances <= max_instances, max_instances >= 1; env names like FOO_BAR."
  }
  validation {
    condition = alltrue([for w in values(var.workers) :
      (w.queue.max_attempts == -1 || w.queue.max_attempts >= 1) &&
      can(regex("^[0-9]+(\\.[0-9]+)?s$", w.queue.min_backoff)) &&
      can(regex("^[0-9]+(\\.[0-9]+)?s$", w.queue.max_backoff)) &&
      try(tonumber(trimsuffix(w.queue.min_backoff, "s")) <= tonumber(trimsuffix(w.queue.max_backoff, "s")), false) &&
      w.queue.max_doublings >= 0 &&
      w.queue.max_dispatches_per_second > 0 && w.queue.max_dispatches_per_second <= 50000 &&
      (w.queue.max_concurrent_dispatches == null || try(w.queue.max_concurrent_dispatches >= 1 && w.queue.max_concurrent_dispatches <= 5000 * ceil(w.queue.max_dispatches_per_second / 500), false))
    ])
    error_message = "Worker queues: max_attempts -1 (unlimited) or >= 1; min_backoff <= max_backoff, both like \"10s\"; max_dispatches_per_second in (0, 50000] (above 500 over several queues); max_concurrent_dispatches 1-5000 per queue (ceil(max_dispatches_per_second / 500) queues)."
  }
}

variable "worker_images" {
  description = "Image overrides by worker name, taking precedence over workers[name].image; cloudbuild.yaml passes the image it just built. Every key must be a worker."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for image in values(var.worker_images) : length(trimspace(image)) > 0])
    error_message = "worker_images values must be non-empty image references."
  }
}

variable "retention_days" {
  description = "Days an ended task, its attempt records and its run's document are kept before Firestore's TTL policies delete them (SERVO_RETENTION_DAYS); a tenant's retention_days in tenant_quotas overrides it. At least 30: the idempotency window, so that a key never maps to a deleted task (docs/cost.md, Retention)."
  type        = number
  default     = 30

  validation {
    condition     = var.retention_days >= 30 && floor(var.retention_days) == var.retention_days
    error_message = "retention_days must be a whole number of at least 30 (the idempotency window)."
  }
}
