// Package api holds the wire types of Servo's worker contract and control
// API: the envelope a worker receives, the bodies of its callbacks and their
// answers, claims, the task and run views, the submit, list, counts, runs
// and events bodies, and the error body with its machine-readable code,
// field and disposition. docs/contract.md is the contract these types carry.
//
// The package has no dependencies beyond the standard library, so a worker
// or a client that imports it pulls in nothing of the server. Its types are
// the JSON of the HTTP interfaces: field names and values are stable within
// a major version.
package api
