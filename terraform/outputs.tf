# Nothing secret is output: the signing keys stay in Secret Manager (and in
# the state, which must be kept private).

output "callback_base_url" {
  description = "Base URL of the callbacks function (SERVO_CALLBACK_BASE_URL); workers POST /v1/tasks/{id}/started|heartbeat|completed under it."
  value       = module.function["callbacks"].url
}

output "control_api_url" {
  description = "URL of the control API function (IAM-protected: call it with an identity token of one of api_invokers)."
  value       = module.function["api"].url
}

output "sweeper_function" {
  description = "Name of the sweeper function."
  value       = module.function["sweeper"].service_name
}

output "worker_urls" {
  description = "HTTPS URL of each worker service."
  value       = { for name, w in module.worker : name => w.url }

  precondition {
    condition     = length(setsubtract(keys(var.worker_images), keys(var.workers))) == 0
    error_message = "worker_images names workers that are not in workers: ${join(", ", setsubtract(keys(var.worker_images), keys(var.workers)))}."
  }
}

output "queue_ids" {
  description = "The first Cloud Tasks queue of each worker (projects/P/locations/L/queues/Q); worker_queue_ids has all of them."
  value       = { for name, w in module.worker : name => w.queue_id }
}

output "worker_queue_ids" {
  description = "Every Cloud Tasks queue of each worker, the first first (several when its queue.max_dispatches_per_second is above 500)."
  value       = { for name, w in module.worker : name => w.queue_ids }
}

output "topics" {
  description = "Pub/Sub topic IDs: events (SERVO_EVENTS_TOPIC), dead_letter (SERVO_DEAD_LETTER_TOPIC), sweep."
  value       = { for key, t in google_pubsub_topic.topic : key => t.name }
}

output "service_accounts" {
  description = "Service account emails: one per component, and workers.<name> for each worker's runtime account."
  value = merge(
    { for key, sa in google_service_account.component : key => sa.email },
    { for name, w in module.worker : "workers.${name}" => w.service_account_email },
  )
}

output "signing_key_secret" {
  description = "Secret Manager secret holding the token signing key ring (its name, not its value)."
  value       = module.signing_keys.secret_id
}

output "artifact_registry" {
  description = "Docker registry path for worker images: docker push <this>/<image>:<tag>."
  value       = "${google_artifact_registry_repository.images.location}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

output "firestore_database" {
  description = "Firestore database ID (SERVO_FIRESTORE_DATABASE)."
  value       = module.firestore.database
}
