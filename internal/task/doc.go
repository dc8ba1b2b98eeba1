// Package task is Servo's domain: the task and attempt model, the rules of
// the worker contract (docs/contract.md §2, §4) over package api's wire
// types (building an attempt's envelope, validating callback bodies, the
// digest that tells identical reports apart), error categories' defaults,
// retry policy and backoff, timers and token lifetimes, ids, and the one
// state machine that every writer uses.
//
// The package is pure: no I/O, no clocks (callers pass the time in), no
// randomness except in id generation (callers pass jitter in). The store
// applies the state machine inside a Firestore transaction; callbacks,
// dispatcher, sweeper and cancel only build [Event] values.
//
// # States
//
//	PENDING ──Enqueued──▶ QUEUED ──Started/Heartbeat──▶ RUNNING ──Cancel──▶ CANCELLING
//	   │                    │                            │   ▲ retry            │
//	   └──Cancel/Deadline/DispatchTimeout──▶ terminal    │   └──(QUEUED n+1)    │
//	                                                     ▼                      ▼
//	                                  SUCCEEDED | FAILED | CANCELLED  (terminal, absorbing)
//
// The edges are listed as data in [Edges]; [Apply] computes the effect of an
// event and never produces an edge that is not listed (a test checks every
// (state, event) pair).
package task
