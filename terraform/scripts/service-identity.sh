#!/usr/bin/env bash
# service-identity.sh SERVICE PROJECT WAIT_SECONDS
#
# Creates the Google-managed service agent of SERVICE (pubsub.googleapis.com,
# eventarc.googleapis.com) in PROJECT, retrying while the API just enabled is
# not ready, then waits WAIT_SECONDS for the agent to propagate to IAM
# before Terraform grants it roles or a trigger uses it. Terraform runs it
# once per agent, at creation (terraform_data.service_identity, pull.tf).
# The GA google provider cannot create the agents (google_project_service_
# identity is google-beta only), so this uses gcloud, authenticated as the
# principal that applies Terraform. Idempotent: an existing agent is
# reported, not recreated.
set -euo pipefail
service=${1:?usage: service-identity.sh SERVICE PROJECT WAIT_SECONDS}
project=${2:?usage: service-identity.sh SERVICE PROJECT WAIT_SECONDS}
wait=${3:-60}
attempts=${SERVO_IDENTITY_ATTEMPTS:-10}
pause=${SERVO_IDENTITY_PAUSE:-15}

if ! command -v gcloud >/dev/null 2>&1; then
  echo "service-identity: gcloud is not installed: it creates the $service service agent of $project." >&2
  echo "Install the Google Cloud CLI, or create the agent yourself and set create_service_identities = false:" >&2
  echo "  gcloud beta services identity create --service=$service --project=$project" >&2
  exit 1
fi

for ((i = 1; ; i++)); do
  if out=$(gcloud beta services identity create --service="$service" --project="$project" --format='value(email)' 2>&1); then
    break
  fi
  if ((i >= attempts)); then
    echo "service-identity: creating the $service service agent of $project failed $i times; the last answer:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "service-identity: $service not ready yet (try $i of $attempts), again in ${pause}s: $out" >&2
  sleep "$pause"
done
echo "service-identity: $service agent of $project: ${out:-created}"
if ((wait > 0)); then
  echo "service-identity: waiting ${wait}s for it to propagate to IAM"
  sleep "$wait"
fi
