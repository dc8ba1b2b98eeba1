# A second environment in the same project as examples/dev.tfvars: every
# resource name comes from name_prefix, the data lives in its own Firestore
# database (the functions' Firestore role is limited to it), and its pull
# pools' topics are stg-pool-NAME. .ci/run plans both and checks that they
# share no resource name (README.md, "Two environments in one project").

# firestore_location: Firestore in the multi-region eur3 (europe-west1,
# europe-west4, witness europe-north1), as a production deployment would
# choose it: it survives the loss of a region, 99.999 % SLA against a
# region's 99.99 %, for twice a region's price a read, write and delete
# (docs/cost.md, "Firestore location"). A named database: no free quota.
project_id          = "my-servo-dev"
name_prefix         = "stg"
region              = "europe-west1"
firestore_location  = "eur3"
firestore_database  = "servo-staging"
deletion_protection = false

api_invokers = [
  "group:servo-staging@example.com",
]

# Alerts (on by default) notify this channel: replace it with yours
# (gcloud beta monitoring channels create ..., or `gcloud beta monitoring
# channels list` for the existing ones; docs/operations.md, "Alerts").
alert_notification_channels = [
  "projects/my-servo-dev/notificationChannels/CHANNEL_ID",
]

workers = {
  example = {
    # Servo's example worker, pushed to this environment's repository
    # (named after name_prefix) as in examples/dev.tfvars.
    image           = "europe-west1-docker.pkg.dev/my-servo-dev/stg/example-worker:v1"
    timeout_seconds = 900
    concurrency     = 2
    max_instances   = 5
    # max_concurrent_dispatches defaults to max_instances x concurrency.
  }
}

pull_pools = {
  gpu = {
    service_accounts = ["gpu-pool@my-servo-dev.iam.gserviceaccount.com"]
  }
}

jobs = {
  render = {
    worker       = "example"
    task_timeout = "21600s"
  }
}

# The steady rate this environment runs at (load tests at production's
# rate): above both break-evens, so functions_billing = "auto" bills the
# api and the callbacks by instance (README.md, "Billing").
expected_lifecycles_per_second = 10
