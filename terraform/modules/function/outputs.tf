output "url" {
  description = "HTTPS URL of the function: the cloudfunctions.net one billed by request, the service's run.app one (expected_url when set) billed by instance."
  value       = var.billing == "request" ? google_cloudfunctions2_function.this[0].url : coalesce(var.expected_url, google_cloud_run_v2_service.this[0].uri)
}

output "service_name" {
  description = "Name of the function's Cloud Run service (where roles/run.invoker is granted). Read from the resource's id, so that it is unknown while the resource is being replaced (a billing switch): the bindings that use it are then made again on the new service, not left on the deleted one."
  value       = element(split("/", var.billing == "request" ? google_cloudfunctions2_function.this[0].id : google_cloud_run_v2_service.this[0].id), 5)
}
