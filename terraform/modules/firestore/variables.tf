variable "project_id" {
  description = "Project of the database."
  type        = string
}

variable "location" {
  description = "Firestore location (multi-region such as nam5 or eur3, or a region)."
  type        = string
}

variable "database" {
  description = "Database ID, \"(default)\" or a named database."
  type        = string
}

variable "deletion_protection" {
  description = "Enable Firestore delete protection on the database."
  type        = bool
}
