output "url" {
  description = "HTTPS URL of the worker service (SERVO_WORKERS url)."
  value       = google_cloud_run_v2_service.worker.uri
}

output "service_name" {
  description = "Cloud Run service name."
  value       = google_cloud_run_v2_service.worker.name
}

output "queue_id" {
  description = "The first queue's resource name, projects/P/locations/L/queues/Q (SERVO_WORKERS queue)."
  value       = google_cloud_tasks_queue.worker.id
}

output "queue_name" {
  description = "The first queue's name (short)."
  value       = google_cloud_tasks_queue.worker.name
}

output "queue_ids" {
  description = "Every queue of the worker, the first (queue_id) first."
  value       = concat([google_cloud_tasks_queue.worker.id], google_cloud_tasks_queue.sibling[*].id)
}

output "queue_names" {
  description = "Every queue's name (short), the first first."
  value       = concat([google_cloud_tasks_queue.worker.name], google_cloud_tasks_queue.sibling[*].name)
}

output "service_account_email" {
  description = "Runtime service account of the worker."
  value       = google_service_account.worker.email
}
