// Package deploy holds the deployment checks, as tests only: they parse the
// Terraform module in terraform/ (with hcl/v2, no provider needed) and
// cloudbuild.yaml, and hold them to what the Go code expects:
//
//   - terraform_test.go: the Firestore indexes and TTL policies equal
//     store.Indexes and store.TTLFields; each service account holds exactly
//     the roles its component uses, on the resources it uses them on; no
//     primitive roles; every variable has a type and a description; the
//     Terraform and provider version constraints; the functions' entry
//     points, environment and runtime.
//   - cloudbuild_test.go: every file a build step names exists, every
//     substitution used is declared (and every declared one used), and the
//     pipeline has its steps in order.
//
// The test that builds the function source the way the Cloud Functions Go
// buildpack does and starts each entry point is in deploy/buildpack.
package deploy
