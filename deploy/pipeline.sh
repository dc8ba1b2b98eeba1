#!/bin/sh
# deploy/pipeline.sh: Servo's deployment after the worker image is built, in
# the order of docs/operations.md ("Upgrade"): the Firestore indexes first,
# then the plan, `servo migrate` with this build's CLI while the old
# revisions still serve, the apply, and `servo doctor` against the deployed
# API, whose failure fails the script. cloudbuild.yaml runs its stages one
# step each; a shell or another CI runs it whole (docs/operations.md,
# "Deploy").
#
#   deploy/pipeline.sh [STAGE...]
#
# Stages, run in the order given:
#   check       the settings below (every stage checks them first)
#   init        terraform init against the state in TF_STATE_BUCKET/TF_STATE_PREFIX
#   repository  apply the Artifact Registry repository alone (before an image is pushed)
#   indexes     apply module.firestore alone: the database and its indexes
#               (the provider waits until each new index is built)
#   plan        terraform plan -out=tfplan
#   migrate     servo migrate --project PROJECT_ID --database <terraform output>
#   apply       terraform apply tfplan
#   doctor      servo doctor --api <terraform output control_api_url> ...
# With no stage: init indexes plan migrate apply doctor.
#
# Required, no defaults (exit 2 naming each one missing; Cloud Build passes
# its substitutions):
#   PROJECT_ID       the project deployed into ($PROJECT_ID)
#   REGION           the region (_REGION); a var file's region must agree
#   TF_STATE_BUCKET  the bucket holding the Terraform state (_TF_STATE_BUCKET)
#   TF_STATE_PREFIX  the state's prefix in that bucket, one per environment (_TF_STATE_PREFIX)
#   AR_REPOSITORY    the environment's Artifact Registry repository (_AR_REPOSITORY)
#   VAR_FILE         the environment's var file, relative to terraform/ or absolute (_TF_VAR_FILE)
# A var file that sets project_id, region or artifact_repository to another
# value than the one above is refused (exit 2): the plan is never silently
# pointed elsewhere than the var file says.
#
# Optional:
#   WORKER_IMAGES              Terraform map of worker images, e.g. {example="…/example-worker:TAG"}
#   CREATE_SERVICE_IDENTITIES  true|false, the variable create_service_identities
#   DOCTOR_WORKER              the canary's worker (default example)
#   DOCTOR_PAYLOAD             the canary's payload (JSON; default: doctor's)
#   DOCTOR_ATTEMPTS            doctor runs before the script fails (default 3:
#                              a new deployment's sweeper and IAM grants take
#                              a minute or two)
#   DOCTOR_RETRY_SECONDS       pause between them (default 60)
#   TERRAFORM, SERVO           the commands (default terraform and servo on PATH)
#   TERRAFORM_DIR              the root module (default this repository's terraform/)
set -eu

me=deploy/pipeline.sh
here=$(cd "$(dirname "$0")" && pwd)
terraform=${TERRAFORM:-terraform}
servo=${SERVO:-servo}
tf_dir=${TERRAFORM_DIR:-$here/../terraform}

die() { # die STATUS MESSAGE
  echo "$me: $2" >&2
  exit "$1"
}

run() {
  echo "+ $*" >&2
  "$@"
}

# need NAME WHAT: NAME must be set and not empty.
missing=""
need() {
  eval "value=\${$1:-}"
  if [ -z "$value" ]; then
    echo "$me: $1 is not set: $2" >&2
    missing="$missing $1"
  fi
}

# tfvar NAME: the value the var file gives the top-level variable NAME, if
# it sets it (HCL: NAME = "value" at the start of a line; JSON: "NAME": "value").
tfvar() {
  case $var_file in
  *.json) sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$var_file" | head -n 1 ;;
  *) sed -n "s/^$1[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$var_file" | head -n 1 ;;
  esac
}

# agree NAME SETTING: the var file does not set NAME to another value than
# the setting's.
conflicts=""
agree() {
  eval "want=\${$2}"
  got=$(tfvar "$1")
  if [ -n "$got" ] && [ "$got" != "$want" ]; then
    echo "$me: $VAR_FILE sets $1 = \"$got\" but $2 is \"$want\": make them agree (one environment, one $1)" >&2
    conflicts="$conflicts $1"
  fi
}

check() {
  missing=""
  need PROJECT_ID "the Google Cloud project to deploy into (Cloud Build: \$PROJECT_ID)"
  need REGION "the region of the deployment and of its image repository (Cloud Build: the _REGION substitution)"
  need TF_STATE_BUCKET "the GCS bucket holding the Terraform state (Cloud Build: the _TF_STATE_BUCKET substitution)"
  need TF_STATE_PREFIX "the state's prefix in that bucket, one per environment (Cloud Build: the _TF_STATE_PREFIX substitution)"
  need AR_REPOSITORY "the environment's Artifact Registry repository, one per environment (Cloud Build: the _AR_REPOSITORY substitution)"
  need VAR_FILE "the environment's Terraform var file, relative to terraform/ (Cloud Build: the _TF_VAR_FILE substitution)"
  if [ -n "$missing" ]; then
    die 2 "refusing to run without:$missing (no defaults: two environments must not share a state or a repository)"
  fi
  [ -d "$tf_dir" ] || die 2 "no Terraform module at $tf_dir"
  tf_dir=$(cd "$tf_dir" && pwd)
  case $VAR_FILE in
  /*) var_file=$VAR_FILE ;;
  *) var_file=$tf_dir/$VAR_FILE ;;
  esac
  [ -f "$var_file" ] || die 2 "VAR_FILE: no such file: $var_file"
  conflicts=""
  agree project_id PROJECT_ID
  agree region REGION
  agree artifact_repository AR_REPOSITORY
  if [ -n "$conflicts" ]; then
    die 2 "refusing to run: the var file and the settings disagree on:$conflicts"
  fi
}

# tf_vars SUBCOMMAND ARGS...: terraform with the environment's variables.
tf_vars() {
  sub=$1
  shift
  run "$terraform" "$sub" "$@" \
    -var-file="$var_file" \
    -var="project_id=$PROJECT_ID" \
    -var="region=$REGION" \
    -var="artifact_repository=$AR_REPOSITORY" \
    ${CREATE_SERVICE_IDENTITIES:+"-var=create_service_identities=$CREATE_SERVICE_IDENTITIES"} \
    ${WORKER_IMAGES:+"-var=worker_images=$WORKER_IMAGES"}
}

# output NAME: a string output of the applied state.
output() {
  value=$("$terraform" output -raw "$1") || die 1 "terraform output $1 failed: is the state applied (stage indexes or apply)?"
  [ -n "$value" ] || die 1 "terraform output $1 is empty"
  printf '%s\n' "$value"
}

stage_init() {
  # The module has no backend block, so that it also plans offline: the
  # GCS backend is declared here, in a file git ignores. -reconfigure: a
  # working directory last used for another environment is pointed at this
  # one's state, never copied into it.
  printf 'terraform {\n  backend "gcs" {}\n}\n' >backend.tf
  run "$terraform" init -input=false -reconfigure \
    -backend-config="bucket=$TF_STATE_BUCKET" -backend-config="prefix=$TF_STATE_PREFIX"
}

stage_repository() {
  tf_vars apply -input=false -auto-approve -target=google_artifact_registry_repository.images
}

stage_indexes() {
  tf_vars apply -input=false -auto-approve -target=module.firestore
}

stage_plan() {
  tf_vars plan -input=false -out=tfplan
}

stage_migrate() {
  database=$(output firestore_database)
  run "$servo" migrate --project "$PROJECT_ID" --database "$database"
}

stage_apply() {
  run "$terraform" apply -input=false tfplan
}

stage_doctor() {
  api=$(output control_api_url)
  database=$(output firestore_database)
  topics=$("$terraform" output -json topics) || die 1 "terraform output topics failed: is the state applied?"
  topic=$(printf '%s\n' "$topics" | sed -n 's/.*"events"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  [ -n "$topic" ] || die 1 "terraform output topics names no events topic: $topics"
  attempts=${DOCTOR_ATTEMPTS:-3}
  pause=${DOCTOR_RETRY_SECONDS:-60}
  attempt=1
  while :; do
    status=0
    run "$servo" doctor --api "$api" --project "$PROJECT_ID" --database "$database" --topic "$topic" \
      --worker "${DOCTOR_WORKER:-example}" ${DOCTOR_PAYLOAD:+"--payload=$DOCTOR_PAYLOAD"} || status=$?
    [ "$status" -ne 0 ] || return 0
    if [ "$attempt" -ge "$attempts" ]; then
      die 1 "servo doctor failed (exit $status, $attempt of $attempts runs): the deployment is not healthy"
    fi
    echo "$me: servo doctor failed (exit $status, run $attempt of $attempts); again in ${pause}s" >&2
    sleep "$pause"
    attempt=$((attempt + 1))
  done
}

if [ $# -eq 0 ]; then
  set -- init indexes plan migrate apply doctor
fi
for stage in "$@"; do
  case $stage in
  check | init | repository | indexes | plan | migrate | apply | doctor) ;;
  *) die 2 "unknown stage $stage (check, init, repository, indexes, plan, migrate, apply, doctor)" ;;
  esac
done
check
cd "$tf_dir"
for stage in "$@"; do
  echo "== $me $stage ($TF_STATE_PREFIX, $VAR_FILE)" >&2
  if [ "$stage" != check ]; then
    "stage_$stage"
  fi
done
