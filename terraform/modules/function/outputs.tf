output "url" {
  description = "HTTPS URL of the function."
  value       = google_cloudfunctions2_function.this.url
}

output "service_name" {
  description = "Name of the function's Cloud Run service (where roles/run.invoker is granted)."
  value       = google_cloudfunctions2_function.this.name
}
