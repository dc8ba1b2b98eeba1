output "secret_id" {
  description = "Secret ID (short name) of the key ring secret."
  value       = google_secret_manager_secret.keys.secret_id
}

output "secret_name" {
  description = "Resource name of the key ring secret as Secret Manager reports it: projects/NUMBER/secrets/ID."
  value       = google_secret_manager_secret.keys.name
}

output "version" {
  description = "Version number of the key ring Terraform wrote last (null when the ring is managed externally); the functions mount \"latest\"."
  value       = one(google_secret_manager_secret_version.keys[*].version)
}
