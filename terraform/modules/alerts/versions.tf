terraform {
  required_providers {
    google = {
      source = "hashicorp/google"
    }
  }
}
