output "url" {
  description = "HTTPS URL of the worker service (SERVO_WORKERS url)."
  value       = google_cloud_run_v2_service.worker.uri
}

output "service_name" {
  description = "Cloud Run service name."
  value       = google_cloud_run_v2_service.worker.name
}

output "queue_id" {
  description = "Queue resource name, projects/P/locations/L/queues/Q (SERVO_WORKERS queue)."
  value       = google_cloud_tasks_queue.worker.id
}

output "queue_name" {
  description = "Queue name (short)."
  value       = google_cloud_tasks_queue.worker.name
}

output "service_account_email" {
  description = "Runtime service account of the worker."
  value       = google_service_account.worker.email
}
