package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newRoot builds the servo command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "servo",
		Short: "Servo's local stack and control API client",
		Long: `servo runs Servo's local stack (servo dev) and talks to a Servo control API:
submit, inspect, watch, cancel and rerun tasks, list runs, tail transitions.

Client commands take --api URL (default $SERVO_API, which servo dev prints)
and --json (JSON for scripts instead of tables).

Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict,
5 the watched task did not succeed.`,
		Example: `  go run ./cmd/servo dev                  # the local stack and a demo run
  export SERVO_API=http://127.0.0.1:8080
  servo submit --tenant acme --workspace ws --key k1 --worker example --payload '{"partitions": 8}'
  servo watch task_01HGW5N7XHJM4GX29KZRXQP6N9`,
		Args:              cobra.ArbitraryArgs,
		SilenceErrors:     true,
		SilenceUsage:      true,
		Version:           versionString(),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("no command\n%s", shortUsage(cmd))
			}
			return unknownCommand(cmd, args[0])
		},
	}
	root.SuggestionsMinimumDistance = 2
	// Run bare, servo and its groups only print a usage error: show
	// "servo [command]" alone in their usage (servo dev, which runs and
	// has subcommands, shows both).
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}", `{{if and .Runnable (or (not .HasAvailableSubCommands) (eq .Name "dev"))}}`, 1))
	root.SetVersionTemplate("servo {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(
		newDevCmd(),
		newSubmitCmd(),
		newGetCmd(),
		newListCmd(),
		newRunsCmd(),
		newCancelCmd(),
		newRerunCmd(),
		newWatchCmd(),
		newEventsCmd(),
		newEmulatorCmd(),
		newVersionCmd(),
		newUsageCmd(),
		newTokenCmd(),
		newKeysCmd(),
		newMigrateCmd(),
		newDoctorCmd(),
		newQueuesCmd(),
		newSchedulesCmd(),
	)
	addAsFlag(root)
	return root
}

// group returns a command that only holds subcommands: run bare or with
// an unknown subcommand it is a usage error.
func group(use, short, example string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("%s needs a subcommand\n%s", cmd.CommandPath(), shortUsage(cmd))
			}
			return unknownCommand(cmd, args[0])
		},
	}
	c.SuggestionsMinimumDistance = 2
	c.AddCommand(subs...)
	return c
}

// unknownCommand is the usage error for `servo NAME` with no such command.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return usageErr("%s\n%s", msg, shortUsage(cmd))
}

// shortUsage is the usage line and where to read more.
func shortUsage(cmd *cobra.Command) string {
	use := cmd.UseLine()
	if cmd.HasSubCommands() {
		use = cmd.CommandPath() + " COMMAND [flags]"
	}
	return fmt.Sprintf("Usage: %s\nRun '%s --help' for commands, flags and examples.", use, cmd.CommandPath())
}

// flagError turns a flag parsing error into a usage error with the short
// usage and, for an unknown flag, the closest known one.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	var name string
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		name = strings.TrimPrefix(msg, "unknown flag: --")
	case strings.HasPrefix(msg, "unknown shorthand flag: "):
		// "unknown shorthand flag: 'x' in -xyz"
		if _, rest, ok := strings.Cut(msg, " in -"); ok {
			name = rest
		}
	}
	if name != "" {
		if s := closestFlag(cmd, name); s != "" {
			msg += "\nDid you mean --" + s + "?"
		}
	}
	return usageErr("%s: %s\n%s", cmd.CommandPath(), msg, shortUsage(cmd))
}

// closestFlag returns the flag of cmd nearest to name, if one is close.
func closestFlag(cmd *cobra.Command, name string) string {
	name, _, _ = strings.Cut(name, "=")
	best, bestD := "", 3
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := levenshtein(strings.ToLower(name), f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 2 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// args checks positional arguments: exactly the names given.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErr("%s wants %s, got %d argument(s)\n%s", cmd.CommandPath(), strings.Join(names, " "), len(args), shortUsage(cmd))
		}
		return nil
	}
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("%s takes no arguments (got %q)\n%s", cmd.CommandPath(), args[0], shortUsage(cmd))
	}
	return nil
}

// version and commit from the binary's build info.
func buildVersion() (version, commit string, dirty bool) {
	version, commit = "(devel)", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if v := bi.Main.Version; v != "" {
		version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	return
}

func versionString() string {
	v, c, dirty := buildVersion()
	s := v + " (commit " + c
	if dirty {
		s += ", modified"
	}
	return s + ")"
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print servo's version and commit",
		Long: `Print servo's version and the commit it was built from, as recorded in the
binary's build information (go install ...@vX.Y.Z records the version; a
build from a checkout records the commit).`,
		Example: "  servo version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "servo "+versionString())
			return err
		},
	}
}
