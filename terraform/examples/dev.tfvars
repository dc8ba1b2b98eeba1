# A development deployment. Copy it, set project_id (and the rest), then:
#   terraform apply -var-file=examples/dev.tfvars
# Every variable is described in variables.tf.

# firestore_location: Firestore in europe-west1, a region, the functions'
# own: a development deployment needs no survival of a region's loss (the
# multi-region eur3's 99.999 % SLA against 99.99 %), and a region's reads,
# writes and deletes cost half a multi-region's (docs/cost.md, "Firestore
# location"). Its (default) database gets Firestore's free quota. The
# location cannot be changed after creation: a deployment made with eur3
# keeps eur3 in its own var file.
project_id          = "my-servo-dev"
region              = "europe-west1"
firestore_location  = "europe-west1"
deletion_protection = false

# Who may call the control API (never allUsers).
api_invokers = [
  "group:servo-dev@example.com",
]

# Alerts are on by default and need a notification channel
# (alert_notification_channels; docs/operations.md, "Alerts"). A
# development deployment nobody is on call for opts out explicitly:
alerts_enabled = false

# One worker: Servo's example worker (examples/worker), the one the smoke
# test (`servo doctor --worker example`, docs/operations.md) submits its
# canary to. Its image lives in the Artifact Registry repository Terraform
# creates (artifact_repository, default "servo"), so the first time:
#   terraform apply -var-file=examples/dev.tfvars -target=google_artifact_registry_repository.images
#   REPO=$(terraform output -raw artifact_registry)
#   docker build -f ../examples/worker/Dockerfile -t $REPO/example-worker:v1 ..
#   docker push $REPO/example-worker:v1
# then the whole apply (terraform/README.md, "Deploy a worker").
# cloudbuild.yaml builds and pushes it itself and overrides this image
# through worker_images.
workers = {
  example = {
    image           = "europe-west1-docker.pkg.dev/my-servo-dev/servo/example-worker:v1"
    memory          = "512Mi"
    timeout_seconds = 900
    max_instances   = 5
    queue = {
      max_attempts              = 10
      min_backoff               = "1s"
      max_backoff               = "300s"
      max_doublings             = 5
      max_dispatches_per_second = 5
      max_concurrent_dispatches = 5 # at most max_instances x concurrency
    }
  }
}

# One job worker: the example worker's image (worker_images applies) run as
# a Cloud Run Job, one execution per attempt, for tasks of up to 6 hours.
jobs = {
  render = {
    worker       = "example"
    task_timeout = "21600s"
    memory       = "512Mi"
  }
}

functions = {
  api       = { max_instances = 5 }
  callbacks = { max_instances = 10 }
}

# One pull pool (README.md, "Pull pools"): its topic and subscription are
# servo-pool-gpu; examples/staging.tfvars has a pool of the same name in the
# same project, as stg-pool-gpu.
pull_pools = {
  gpu = {
    service_accounts = ["gpu-pool@my-servo-dev.iam.gserviceaccount.com"]
  }
}

# A developer's few tasks an hour: request-based billing, never an idle
# instance billed (README.md, "Billing").
expected_lifecycles_per_second = 0.01
