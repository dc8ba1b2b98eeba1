// Package emulator starts and stops the official Google Cloud emulators
// (Firestore and Pub/Sub) for tests and the local stack.
//
// [Start] runs the emulator on a free port of 127.0.0.1 and waits until it
// answers HTTP GET / with 200. When the port is taken between choosing and
// binding it (the emulator logs a BindException; the Pub/Sub emulator's JVM
// then keeps running without a server), Start stops it and tries another
// port, up to three in all. It runs the emulator's jar from the Cloud SDK
// directly with java — found next to the gcloud on PATH
// (ROOT/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar,
// ROOT/platform/pubsub-emulator/lib/cloud-pubsub-emulator-*-all.jar), with
// the arguments gcloud's wrapper would pass and the small, fast-starting
// [JVMOptions] — so no gcloud or Python process runs alongside. The first
// start of each emulator writes a class-data sharing (AppCDS) archive into
// the user cache dir ($XDG_CACHE_HOME/servo/emulators or
// ~/.cache/servo/emulators) when it stops; later starts load it and boot in
// about half the time. When a jar is not found, or with
// SERVO_EMULATOR_LAUNCH=gcloud ([LaunchEnv]), it runs
// `gcloud emulators firestore start` or `gcloud beta emulators pubsub start`
// instead. It needs gcloud with the emulator components, a Java 11+ runtime
// and bash on PATH; when one is missing it fails with an error wrapping
// [ErrMissingTool] that names what to install.
//
// Emulators must never outlive the process that started them, however it
// ends:
//
//   - Java (or gcloud) is started as the leader of a new session and process
//     group; a Java emulator gcloud spawns stays in that group. (gcloud moves
//     itself into a new group unless it leads its session, so a plain Setpgid
//     would leave Java out of reach.)
//   - [Process.Stop] sends SIGTERM to the whole group, waits up to
//     [StopTimeout] (longer while Java writes its class-data sharing
//     archive), then sends SIGKILL to the group. Killing gcloud alone
//     would leave Java running.
//   - A small bash watchdog, in a group of its own, waits on a pipe whose
//     write end only this process holds; when this process is gone (killed
//     with SIGKILL, crashed, or exited after a `go test -timeout` panic)
//     the pipe reads end of file (and its parent pid changes, which it
//     also checks every few seconds), the watchdog kills the emulator's
//     group, and exits once the group is gone. Idle, it starts no process
//     and uses no CPU.
//   - On Linux the kernel also signals Java or gcloud (SIGKILL) and the watchdog
//     (SIGTERM, which triggers the same clean-up) the moment this process
//     dies (PR_SET_PDEATHSIG).
//
// The harness only ever signals process groups it created.
//
// Tests sharing one emulator isolate themselves by project id (see package
// emulatortest) or clear the Firestore emulator with [ResetFirestore].
//
// The harness needs a Unix system with bash; CI and the local stack run it
// on Linux.
package emulator
