// Package docpages tests the documentation as a reader uses it.
//
// TestFirstWorkerPages runs the "your first worker" pages
// (docs/workers/go.md, python.md, typescript.md) command by command, from
// an empty folder, against one real local stack (package devstack, on the
// emulators), and checks what the pages promise: a task that fails once
// and SUCCEEDED on its second attempt, resumed from its checkpoint, and a
// long task CANCELLED while it ran, its handler observing the cancel.
//
// A page marks what the test runs in the info strings of its fenced code
// blocks, after the language; blocks without these words are prose:
//
//	```sh run=stack            the `servo dev` command (terminal 1): not run;
//	                           its --pull-pool flags name the pools of the
//	                           test's one shared stack
//	```sh run                  commands of the page's terminal, in order, in
//	                           one bash (set -eo pipefail): variables and the
//	                           current directory carry over
//	```sh run exit=5           the same, ending with exit status 5
//	```sh run after="TEXT"     run once the background process printed TEXT
//	```sh run=background       the worker (another terminal): started in the
//	                           background from the current directory, stopped
//	                           with Ctrl-C (SIGINT to its process group) at the
//	                           end, which it must obey within a minute, with
//	                           exit status 0
//	```go file=main.go         the file's contents, written to the current
//	                           directory
//	```text output=background  lines the background process prints, in order
//
// In TEXT and output lines "…" stands for anything. The test replaces
// servo dev's default address, 127.0.0.1:8080, with its stack's, builds the
// servo CLI onto the PATH (what the pages' `go install ./cmd/servo` does),
// and puts the Servo checkout beside the page's folder as ../servo.
//
// TestReadme and TestRelativeLinks hold README.md to a front door of at
// most 200 lines and every relative link of README.md and docs/ to a file,
// and a heading, that exists.
//
// It needs python3 (>= 3.10, with venv) and node (>= 20.3) with npm; a
// missing one fails the test with what to install.
package docpages
