// Package buildpack holds one test (and no other code): it does to the
// function source what the Cloud Functions Go buildpack does
// (GoogleCloudPlatform/buildpacks, cmd/go/functions_framework) and then
// starts the result once per entry point against the Firestore and Pub/Sub
// emulators and Servo's Cloud Tasks emulator:
//
//  1. copy the repository as terraform/ zips it (the same excludes);
//  2. check the buildpack's rules: go.mod and go.sum at the root, a module
//     path with a dot, exactly one Go package at the root (test files
//     included, as the buildpack parses them too), not package main, and a
//     root package that imports functions-framework-go/functions (so the
//     buildpack generates the main that blank-imports it);
//  3. write that main in functions.local/app inside the copied module, as
//     the buildpack does, and go build it offline;
//  4. run it with FUNCTION_TARGET set to ServoAPI, ServoCallbacks,
//     ServoSweeper and ServoJobs in turn and get a non-5xx answer from each (and check
//     that an unknown FUNCTION_TARGET does not start).
//
// It is a package of its own so that the emulators start only for it.
package buildpack
