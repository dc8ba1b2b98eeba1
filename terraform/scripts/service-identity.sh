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
#
# Exit status 0: the agent exists (its e-mail on stdout). 1: it could not be
# created, and stderr says why. Only an answer that may change by waiting
# is retried (SERVO_IDENTITY_ATTEMPTS tries, SERVO_IDENTITY_PAUSE seconds
# apart: 10 and 15 by default): an API just enabled (SERVICE_DISABLED, or
# a PERMISSION_DENIED that names no permission) or a transient error.
# Two answers stop at once, since no wait mends them:
#   - gcloud has no usable credentials (not logged in, or its login
#     expired): gcloud's own message says so, or, after an answer this
#     script does not know, `gcloud auth print-access-token` fails;
#   - permission denied: the answer names a permission the caller lacks.
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

# gcloud's own answers when it has no credentials to send (no login, an
# expired or revoked one, no metadata server), and Google's to a request
# without valid ones.
no_credentials='You do not currently have an active account selected|does not have any valid credentials|Reauthentication failed|problem refreshing (your )?(current )?auth tokens|invalid_grant|Could not automatically determine credentials|UNAUTHENTICATED|invalid authentication credentials'
# An API just enabled: Service Usage answers 403 PERMISSION_DENIED, reason
# SERVICE_DISABLED, "... has not been used in project N before or it is
# disabled ... If you enabled this API recently, wait a few minutes for the
# action to propagate to our systems and retry".
just_enabled='SERVICE_DISABLED|has not been used in project|it is disabled|enabled this API recently|to propagate'
# A permission the caller lacks, named: waiting does not grant it.
denied='[Pp]ermission denied|[Pp]ermission .{1,80} denied|does not have (the )?(required )?permission|[Cc]aller does not have|IAM_PERMISSION_DENIED|AUTH_PERMISSION_DENIED'
# Answers that may change by waiting: a 403 that names no permission (what
# an API enabled a moment ago answers), conflicts and server trouble.
transient='PERMISSION_DENIED|FAILED_PRECONDITION|ABORTED|UNAVAILABLE|DEADLINE_EXCEEDED|INTERNAL|RESOURCE_EXHAUSTED|NOT_FOUND|[Tt]ry again|[Rr]etry|HTTPError 5[0-9][0-9]|HTTPError 429|[Tt]imed out|[Cc]onnection'

# The account gcloud uses, for messages ("" when none).
account() {
  local a=""
  IFS= read -r a < <(gcloud auth list --filter=status:ACTIVE --format='value(account)' 2>/dev/null) || true
  printf '%s' "$a"
}

# indent prints an answer two spaces in.
indent() {
  local line
  while IFS= read -r line; do
    printf '  %s\n' "$line"
  done <<<"$1"
}

not_logged_in() {
  echo "service-identity: gcloud has no usable credentials, so it cannot create the $service service agent of $project (a login problem, not an agent that is not ready yet: waiting would not help). gcloud answered:" >&2
  indent "$1" >&2
  cat >&2 <<EOF
Give gcloud the principal that applies Terraform, then apply again:
  - on a workstation: gcloud auth login (gcloud commands do not read the
    Application Default Credentials that Terraform uses, from
    gcloud auth application-default login; to reuse those, export
    CLOUDSDK_AUTH_ACCESS_TOKEN=\$(gcloud auth application-default print-access-token));
  - in Cloud Build: gcloud uses the build's service account; check that the
    build runs with one (serviceAccount in the build or trigger) and that
    it is enabled.
Or create the agent yourself and set create_service_identities = false:
  gcloud beta services identity create --service=$service --project=$project
EOF
  exit 1
}

permission_denied() {
  local who member=PRINCIPAL
  who=$(account)
  case $who in
  "") ;;
  *.gserviceaccount.com) member=serviceAccount:$who ;;
  *) member=user:$who ;;
  esac
  echo "service-identity: permission denied creating the $service service agent of $project${who:+ as $who} (waiting would not help). gcloud answered:" >&2
  indent "$1" >&2
  cat >&2 <<EOF
The principal needs serviceusage.services.use on $project: grant it
roles/serviceusage.serviceUsageConsumer (roles/owner and roles/editor include
it; in Cloud Build, grant it to the build's service account), e.g.
  gcloud projects add-iam-policy-binding $project --member=$member --role=roles/serviceusage.serviceUsageConsumer
then apply again. Or have a principal that may create the agent do it, and
set create_service_identities = false:
  gcloud beta services identity create --service=$service --project=$project
EOF
  exit 1
}

for ((i = 1; ; i++)); do
  if out=$(gcloud beta services identity create --service="$service" --project="$project" --format='value(email)' 2>&1); then
    break
  fi
  if [[ $out =~ $no_credentials ]]; then
    not_logged_in "$out"
  elif [[ $out =~ $just_enabled ]]; then
    : # not ready yet
  elif [[ $out =~ $denied ]]; then
    permission_denied "$out"
  elif [[ ! $out =~ $transient ]] && ! gcloud auth print-access-token >/dev/null 2>&1; then
    # An answer this script does not know: retry it only if gcloud has
    # credentials at all.
    not_logged_in "$out"
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
