package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/client"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// commandPaths lists every command of the tree, cobra's help and
// completion commands included.
func commandPaths() [][]string {
	root := newRoot()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		out = append(out, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(root, nil)
	return out
}

// runCLI runs args in-process and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := execute(context.Background(), args, strings.NewReader(""), &out, &errOut)
	code := reportTo(&errOut, err)
	return out.String(), errOut.String(), code
}

// Every command's help (--help, -h and `servo help CMD` alike) is its
// golden file: synopsis, flags with defaults, examples; exit 0.
func TestHelpGolden(t *testing.T) {
	t.Setenv(client.APIEnv, "http://from-env:1") // must not leak into help
	t.Setenv("TMPDIR", "/elsewhere")
	// Flags that default from the environment: the goldens show none.
	for _, v := range []string{"SERVO_PROJECT", "GOOGLE_CLOUD_PROJECT", "SERVO_FIRESTORE_DATABASE"} {
		t.Setenv(v, "")
	}
	paths := commandPaths()
	if len(paths) < 15 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, path := range paths {
		name := strings.Join(append([]string{"servo"}, path...), "_")
		t.Run(name, func(t *testing.T) {
			out, errOut, code := runCLI(t, append(path, "--help")...)
			if code != 0 || errOut != "" {
				t.Fatalf("--help: exit %d, stderr %q", code, errOut)
			}
			for _, args := range [][]string{append(path, "-h"), append([]string{"help"}, path...)} {
				if len(path) > 0 && path[0] == "help" && len(args) > 0 && args[0] == "help" {
					continue
				}
				o, e, c := runCLI(t, args...)
				if c != 0 || e != "" || o != out {
					t.Errorf("servo %s: exit %d, stderr %q, output differs from --help:\n%s", strings.Join(args, " "), c, e, o)
				}
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/servo -run TestHelpGolden -update)", err)
			}
			if out != string(want) {
				t.Errorf("help differs from %s (rerun with -update if intended):\n%s", golden, out)
			}
			// Servo's own commands say what they are for and show an example.
			if len(path) > 0 && path[0] != "help" && path[0] != "completion" {
				if !strings.Contains(out, "Examples:\n") || !strings.Contains(out, "Usage:\n") {
					t.Errorf("servo %s --help has no usage or examples:\n%s", strings.Join(path, " "), out)
				}
			}
			if strings.Contains(out, "from-env") || strings.Contains(out, "/elsewhere") {
				t.Errorf("help shows the environment:\n%s", out)
			}
		})
	}
}

// Each kind of bad command line: exit 2, the short usage, and a "did you
// mean" where one is close; nothing on stdout.
func TestFlagErrors(t *testing.T) {
	t.Setenv(client.APIEnv, "http://127.0.0.1:1")
	cases := []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"no command", nil, []string{"no command", "Usage: servo COMMAND"}},
		{"unknown command", []string{"sumbit"}, []string{`unknown command "sumbit"`, "Did you mean this?\n\tsubmit", "Usage: servo COMMAND"}},
		{"unknown command, nothing close", []string{"frobnicate"}, []string{`unknown command "frobnicate"`, "Run 'servo --help'"}},
		{"unknown subcommand", []string{"events", "tial"}, []string{`unknown command "tial" for "servo events"`, "\ttail"}},
		{"group without subcommand", []string{"emulator"}, []string{"servo emulator needs a subcommand", "Usage: servo emulator COMMAND"}},
		{"unknown flag", []string{"list", "--wrker", "x"}, []string{"unknown flag: --wrker", "Did you mean --worker?", "Usage: servo list [flags]"}},
		{"unknown flag, prefix", []string{"submit", "--idem", "k"}, []string{"unknown flag: --idem", "Did you mean --idempotency-key?"}},
		{"unknown flag, nothing close", []string{"get", "x", "--zzzzzz"}, []string{"unknown flag: --zzzzzz", "Usage: servo get ID"}},
		{"unknown shorthand", []string{"watch", "x", "-q"}, []string{"unknown shorthand flag: 'q' in -q"}},
		{"bad value", []string{"list", "--limit", "many"}, []string{`invalid argument "many" for "--limit"`, "Usage: servo list"}},
		{"bad duration", []string{"events", "tail", "--since", "yesterday"}, []string{`invalid argument "yesterday" for "--since"`}},
		{"missing value", []string{"watch", "--run"}, []string{"flag needs an argument: --run"}},
		{"missing argument", []string{"get"}, []string{"servo get wants ID, got 0 argument(s)", "Usage: servo get ID"}},
		{"extra argument", []string{"cancel", "a", "b"}, []string{"servo cancel wants ID, got 2 argument(s)"}},
		{"argument to a command without", []string{"runs", "r"}, []string{"servo runs takes no arguments"}},
		{"watch both", []string{"watch", "x", "--run", "run_1"}, []string{"watch wants a task ID or --run RUN"}},
		{"bad state", []string{"list", "--state", "NOPE"}, []string{"--state must be one of"}},
		{"since and all", []string{"events", "tail", "--task", "t", "--since", "1m", "--all"}, []string{"pass --since or --all, not both"}},
		{"replay without scope", []string{"events", "tail", "--all"}, []string{"pass --task ID or --run ID"}},
		{"bad worker flag", []string{"dev", "--worker", "nourl"}, []string{"want NAME=URL"}},
		{"sweep too fast", []string{"dev", "--sweep-every", "1ms"}, []string{"--sweep-every must be at least"}},
		{"runs limit", []string{"runs", "--limit", "0"}, []string{"--limit must be from 1 to 100"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, c.args...)
			if code != exitUsage {
				t.Errorf("servo %v: exit %d, want %d; stderr:\n%s", c.args, code, exitUsage, errOut)
			}
			if out != "" {
				t.Errorf("stdout: %q", out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("servo %v: stderr lacks %q:\n%s", c.args, w, errOut)
				}
			}
		})
	}
}

// servo version prints the version and the commit from the build info.
func TestVersion(t *testing.T) {
	out, _, code := runCLI(t, "version")
	v, c, _ := buildVersion()
	if code != 0 || !strings.HasPrefix(out, "servo "+v+" (commit "+c) {
		t.Fatalf("servo version: exit %d, %q", code, out)
	}
	if out2, _, _ := runCLI(t, "--version"); out2 != out {
		t.Errorf("--version %q, version %q", out2, out)
	}
}

// Completion scripts for the three shells.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_servo", "zsh": "#compdef servo", "fish": "complete -c servo"} {
		out, errOut, code := runCLI(t, "completion", shell)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, no %q", shell, code, errOut, want)
		}
	}
}
