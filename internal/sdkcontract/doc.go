// Package sdkcontract holds the contract test every worker SDK must pass:
// one scenario table (happy path, retry with checkpoint, cancel, lease lost
// by 410, lease lost by silence, 503 RETRY then success, REJECTED final,
// duplicate delivery, pull claim race, job crash) run against the real local
// stack (package devstack: the emulators, the API, callbacks, sweeper, pull
// pools and job dispatch) for the Go, Python and TypeScript SDKs, each
// driving a small contract worker (workers/) as a subprocess in push, pull
// and job mode. A proxy between the workers and Servo injects the faults.
//
// It needs python3 (>= 3.10) and node (>= 20) with npm; a missing one fails
// the test with what to install. The TypeScript SDK is built by the test
// (npm ci when sdk/typescript/node_modules is absent, then tsc).
package sdkcontract
