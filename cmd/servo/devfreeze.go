package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/emulator"
)

// devSession is what a running `servo dev` records for `servo dev freeze`
// and `thaw`: its API and the process groups of the emulators it started
// (or kept with --keep).
type devSession struct {
	PID       int                            `json:"pid"`
	API       string                         `json:"api"`
	Emulators map[emulator.Kind]keptEmulator `json:"emulators"`
}

// devSessionDir is where running servo dev processes record their
// sessions: $XDG_CACHE_HOME/servo/dev-sessions (~/.cache/... by default),
// a file per servo dev process.
func devSessionDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory: %w", err)
	}
	return filepath.Join(d, "servo", "dev-sessions"), nil
}

// recordDevSession writes this servo dev's session and returns the
// function that removes it. Emulators servo dev neither started nor kept
// (--firestore, --pubsub) are not recorded: it cannot freeze them.
func recordDevSession(api string, groups map[emulator.Kind]int, hosts map[emulator.Kind]string) (remove func(), err error) {
	dir, err := devSessionDir()
	if err != nil {
		return func() {}, err
	}
	s := devSession{PID: os.Getpid(), API: api, Emulators: map[emulator.Kind]keptEmulator{}}
	for k, g := range groups {
		s.Emulators[k] = keptEmulator{Host: hosts[k], PID: g}
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	path := filepath.Join(dir, strconv.Itoa(s.PID)+".json")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() {}, err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return func() {}, err
	}
	return func() { _ = os.Remove(path) }, nil
}

// keptGroups returns the process groups of the emulators `servo dev
// --keep` recorded, by kind, for the hosts in use.
func keptGroups(hosts map[emulator.Kind]string) map[emulator.Kind]int {
	g := map[emulator.Kind]int{}
	path, err := keptStatePath()
	if err != nil {
		return g
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return g
	}
	var state map[emulator.Kind]keptEmulator
	if json.Unmarshal(b, &state) != nil {
		return g
	}
	for k, e := range state {
		if e.PID > 0 && e.Host == hosts[k] {
			g[k] = e.PID
		}
	}
	return g
}

// liveDevSessions reads the recorded sessions whose servo dev still runs
// (removing the files of those that do not), ordered by pid.
func liveDevSessions() ([]devSession, error) {
	dir, err := devSessionDir()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []devSession
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		var s devSession
		b, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(b, &s) != nil || s.PID <= 0 || syscall.Kill(s.PID, 0) != nil {
			_ = os.Remove(path)
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// newDevSignalCmd is `servo dev freeze` (freeze true) or `servo dev thaw`:
// SIGSTOP or SIGCONT to an emulator a running servo dev started, for the
// runbook's rehearsals of a frozen Firestore or Pub/Sub.
func newDevSignalCmd(freeze bool) *cobra.Command {
	verb, sig, done, undo := "thaw", syscall.SIGCONT, "thawed", ""
	short := "Thaw an emulator `servo dev freeze` froze: it answers again"
	if freeze {
		verb, sig, done, undo = "freeze", syscall.SIGSTOP, "frozen", "; `servo dev thaw %s` ends it"
		short = "Freeze an emulator of a running servo dev (SIGSTOP): it stops answering, as in an outage"
	}
	var api string
	cmd := &cobra.Command{
		Use:   verb + " firestore|pubsub [--api URL]",
		Short: short,
		Long: short + `.

For the runbook's rehearsals (docs/operations.md, "When something goes
wrong"): a frozen emulator holds its connections open and answers
nothing, as a Google service that stalls, so requests wait for their
deadlines rather than fail at once. It signals the emulator's process
group (Java's), which servo dev records while it runs
($XDG_CACHE_HOME/servo/dev-sessions); emulators servo dev did not start
(--firestore, --pubsub) are not known to it: kill -STOP / -CONT their
java process instead. With several servo dev running, --api (default
$SERVO_API, which servo dev's export lines set) picks one.`,
		Example: "  servo dev " + verb + " firestore\n  servo dev " + verb + " pubsub --api http://127.0.0.1:8080",
		Args:    exactArgs("firestore|pubsub"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind := emulator.Kind(args[0])
			if kind != emulator.Firestore && kind != emulator.PubSub {
				return usageErr("unknown emulator %q: name firestore or pubsub", args[0])
			}
			api = cmp.Or(api, os.Getenv(client.APIEnv))
			sessions, err := liveDevSessions()
			if err != nil {
				return err
			}
			var picked []devSession
			for _, s := range sessions {
				if api == "" || strings.TrimSuffix(s.API, "/") == strings.TrimSuffix(api, "/") {
					picked = append(picked, s)
				}
			}
			switch {
			case len(picked) == 0 && api != "":
				return fmt.Errorf("no running servo dev serves %s (%d running)", api, len(sessions))
			case len(picked) == 0:
				return errors.New("no servo dev is running (start one: servo dev)")
			case len(picked) > 1:
				var apis []string
				for _, s := range picked {
					apis = append(apis, s.API)
				}
				return usageErr("%d servo dev are running (%s): pick one with --api", len(picked), strings.Join(apis, ", "))
			}
			s := picked[0]
			e, ok := s.Emulators[kind]
			if !ok {
				return fmt.Errorf("the servo dev at %s did not start its %s emulator (given with --%s?): kill -STOP / -CONT its java process", s.API, kind, kind)
			}
			if err := syscall.Kill(-e.PID, sig); err != nil {
				return fmt.Errorf("%s the %s emulator (process group %d): %w", verb, kind, e.PID, err)
			}
			msg := fmt.Sprintf("%s emulator at %s %s (process group %d)", kind, e.Host, done, e.PID)
			if undo != "" {
				msg += fmt.Sprintf(undo, kind)
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	cmd.Flags().StringVar(&api, "api", "", "the API of the servo dev whose emulator to signal (default $"+client.APIEnv+")")
	return cmd
}
