output "secret_id" {
  description = "Secret ID (short name) of the key ring secret."
  value       = google_secret_manager_secret.keys.secret_id
}

output "version" {
  description = "Version number of the current key ring; the functions mount exactly this version."
  value       = google_secret_manager_secret_version.keys.version
}
