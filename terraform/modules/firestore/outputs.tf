output "database" {
  description = "Firestore database ID."
  value       = google_firestore_database.this.name
}
