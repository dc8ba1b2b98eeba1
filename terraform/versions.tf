terraform {
  required_version = ">= 1.5.7"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 7.0, < 8.0"
    }
    # archive_file zips the function source (glob excludes need >= 2.5).
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.5, < 3.0"
    }
    # random_bytes generates the token signing keys (random_bytes needs >= 3.6).
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6, < 4.0"
    }
  }

  # No backend block here, so that the module validates and plans offline
  # (init -backend=false). Deployments keep the state in GCS: they write a
  # backend.tf with `backend "gcs" {}` (git-ignored) and pass the bucket to
  # init (README.md, "Deploy"; cloudbuild.yaml does the same). The state
  # holds the token signing keys: keep that bucket private.
}
