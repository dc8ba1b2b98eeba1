// Package cloudtasks is a local emulator of Google Cloud Tasks
// (google.cloud.tasks.v2) for Servo.
//
// Google ships no Cloud Tasks emulator. This one is a gRPC server that the
// official Go client (cloud.google.com/go/cloudtasks/apiv2) uses unmodified,
// and it really pushes HTTP tasks to workers the way Cloud Tasks does: with
// the X-CloudTasks-* headers, OIDC/OAuth bearer tokens (signed locally, see
// [Server.PublicKey]), schedule times, dispatch deadlines, RetryConfig
// backoff, Retry-After, rate limits, pause/resume/purge and task-name
// de-duplication with tombstones.
//
// Run it in-process:
//
//	s := cloudtasks.NewServer(cloudtasks.Options{})
//	addr, err := s.Start("127.0.0.1:0")
//	…
//	defer s.Stop()
//	client, err := cloudtasksapi.NewClient(ctx, cloudtasks.ClientOptions(addr)...)
//
// or standalone with `servo emulator cloudtasks --host-port 127.0.0.1:8123`
// ([Run]) and point Servo at it with CLOUD_TASKS_EMULATOR_HOST; [NewClient]
// honours that variable. An injectable [Clock] ([FakeClock] in tests) drives
// every time-based rule.
package cloudtasks
