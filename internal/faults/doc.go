// Package faults is Servo's fault-injection harness, in the spirit of
// Jepsen: it runs the real local stack (`servo dev` as a child process
// against the real Firestore and Pub/Sub emulators, with its Cloud Tasks
// emulator inside), drives it with simulated conforming workers and
// clients over HTTP, injects faults (Firestore and Pub/Sub frozen, Servo
// killed and restarted, workers crashing, clocks skewed), records
// everything every worker and client saw plus every event read from the
// events topic and every task's final state, and checks that history
// against the invariants of PRODUCT §10 (Check, in history.go, is pure and
// unit-tested on hand-made violating histories).
//
// TestFaults is the short mode, run by `go test ./...`; `go test -run
// TestFaults -faults.long ./faults/` is the long mode (README.md).
package faults
