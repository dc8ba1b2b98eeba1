package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/auth/keysecret"
	"github.com/servo-dev/servo/internal/task"
)

// keysNow is the clock of servo keys (tests move it).
var keysNow = time.Now

// defaultRetireGrace is how long after a key stopped signing `servo keys
// retire` waits: a running instance re-reads the ring within
// auth.DefaultRefresh, a retry's token may be valid from up to
// task.MaxTimer ahead, for up to auth.MaxTaskTokenTTL.
var defaultRetireGrace = auth.RetireGrace(auth.DefaultRefresh, task.MaxTimer)

func newKeysCmd() *cobra.Command {
	return group("keys", "Manage the task-token signing key ring (a file or a Secret Manager secret)",
		`  servo keys generate k1 --file ring.json
  servo keys add k2 --file ring.json
  servo keys activate k2 --file ring.json
  servo keys retire k1 --file ring.json
  servo keys add k2 --secret projects/my-project/secrets/servo-token-keys --dry-run`,
		newKeysGenerateCmd(), newKeysShowCmd(), newKeysAddCmd(), newKeysActivateCmd(), newKeysRetireCmd())
}

// keysTarget is where a keys command reads and writes the ring.
type keysTarget struct {
	file, secret string
	dryRun       bool
}

func (k *keysTarget) flags(cmd *cobra.Command, write bool) {
	cmd.Flags().StringVar(&k.file, "file", "", "the key ring file (JSON, written with mode 0600)")
	cmd.Flags().StringVar(&k.secret, "secret", "", "the Secret Manager secret projects/P/secrets/S (its latest version; writes add a version)")
	if write {
		cmd.Flags().BoolVar(&k.dryRun, "dry-run", false, "print the resulting ring (kids and history, no secrets) without writing it")
	}
}

// check requires exactly one of --file and --secret (or none, when
// allowNone).
func (k *keysTarget) check(allowNone bool) error {
	switch {
	case k.file != "" && k.secret != "":
		return usageErr("pass --file or --secret, not both")
	case k.file == "" && k.secret == "" && !allowNone:
		return usageErr("pass --file FILE or --secret projects/P/secrets/S")
	case k.secret != "":
		if err := keysecret.CheckName(k.secret); err != nil {
			return usageErr("--secret: %v", err)
		}
	}
	return nil
}

func (k *keysTarget) read(ctx context.Context) (auth.Ring, error) {
	var data []byte
	var err error
	if k.secret != "" {
		c, cerr := keysecret.New(k.secret)
		if cerr != nil {
			return auth.Ring{}, cerr
		}
		data, err = c.Latest(ctx)
	} else {
		data, err = os.ReadFile(k.file)
	}
	if err != nil {
		return auth.Ring{}, err
	}
	return auth.ParseRing(data)
}

// write stores r (unless --dry-run) and prints what it did and the ring.
func (k *keysTarget) write(ctx context.Context, out io.Writer, r auth.Ring, create bool) error {
	data, err := r.Marshal()
	if err != nil {
		return err
	}
	where := k.file
	switch {
	case k.dryRun:
		where = "nothing written (--dry-run)"
	case k.secret != "":
		c, err := keysecret.New(k.secret)
		if err != nil {
			return err
		}
		if where, err = c.Add(ctx, data); err != nil {
			return err
		}
		where = "new version " + where
	case k.file == "":
		_, err := out.Write(data)
		return err
	default:
		if err := writeFileAtomic(k.file, data, create); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%s\n%v\n", where, r)
	return nil
}

// writeFileAtomic writes data to path with mode 0600 through a temporary
// file and a rename; with create it refuses an existing path.
func writeFileAtomic(path string, data []byte, create bool) error {
	if create {
		if _, err := os.Stat(path); err == nil {
			return &exitError{exitConflict, fmt.Errorf("%s exists; not overwriting a key ring", path)}
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".servo-keys-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func newKeysGenerateCmd() *cobra.Command {
	var k keysTarget
	cmd := &cobra.Command{
		Use:   "generate KID [--file FILE | --secret projects/P/secrets/S] [--dry-run]",
		Short: "Create a key ring with one new random key, active",
		Long: `Create a key ring with one new random 32-byte key named KID, active from now.
With --file it writes a new file (never overwriting one); with --secret it adds
the ring as the secret's first version (refused when the secret already holds
a ring); with neither it prints the ring's JSON on stdout.`,
		Example: `  servo keys generate k1 --file ring.json
  SERVO_TOKEN_KEYS_FILE=ring.json servo dev`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := k.check(true); err != nil {
				return err
			}
			if k.secret != "" {
				if _, err := k.read(cmd.Context()); err == nil {
					return &exitError{exitConflict, fmt.Errorf("%s already holds a key ring; use servo keys add", k.secret)}
				}
			}
			r, err := auth.GenerateRing(args[0], keysNow(), nil)
			if err != nil {
				return err
			}
			return k.write(cmd.Context(), cmd.OutOrStdout(), r, true)
		},
	}
	k.flags(cmd, true)
	return cmd
}

func newKeysShowCmd() *cobra.Command {
	var k keysTarget
	cmd := &cobra.Command{
		Use:     "show [--file FILE | --secret projects/P/secrets/S]",
		Short:   "Show the key ring's kids and history (never its secrets)",
		Example: `  servo keys show --file ring.json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := k.check(false); err != nil {
				return err
			}
			r, err := k.read(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%v\n", r)
			for _, kid := range r.KIDs() {
				if at, ok := r.RetireAt(kid, defaultRetireGrace); ok {
					fmt.Fprintf(cmd.OutOrStdout(), "%s may be retired from %s\n", kid, at.UTC().Format(time.RFC3339))
				}
			}
			return nil
		},
	}
	k.flags(cmd, false)
	return cmd
}

// ringCmd builds a command that reads the ring, applies op and writes it.
func ringCmd(use, short, long, example string, op func(r auth.Ring, kid string, now time.Time) (auth.Ring, error), extra func(*cobra.Command)) *cobra.Command {
	var k keysTarget
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := k.check(false); err != nil {
				return err
			}
			r, err := k.read(cmd.Context())
			if err != nil {
				return err
			}
			next, err := op(r, args[0], keysNow())
			if err != nil {
				switch {
				case errors.Is(err, auth.ErrNoSuchKey):
					return &exitError{exitNotFound, err}
				case errors.Is(err, auth.ErrKeyExists), errors.Is(err, auth.ErrRetireActive), errors.Is(err, auth.ErrRetireTooEarly):
					return &exitError{exitConflict, err}
				}
				return err
			}
			return k.write(cmd.Context(), cmd.OutOrStdout(), next, false)
		},
	}
	k.flags(cmd, true)
	if extra != nil {
		extra(cmd)
	}
	return cmd
}

func newKeysAddCmd() *cobra.Command {
	return ringCmd("add KID (--file FILE | --secret projects/P/secrets/S) [--dry-run]",
		"Add a new random key that verifies but does not sign yet",
		`Add a new random 32-byte key named KID to the ring. It verifies tokens at
once but signs none until activated: add it, let every instance read the new
ring (a new revision, or the re-read on an unknown kid and every 5 minutes),
then activate it.`,
		`  servo keys add k2 --file ring.json
  servo keys add k2 --secret projects/my-project/secrets/servo-token-keys --dry-run`,
		func(r auth.Ring, kid string, now time.Time) (auth.Ring, error) {
			return auth.AddKey(r, kid, now, nil)
		}, nil)
}

func newKeysActivateCmd() *cobra.Command {
	return ringCmd("activate KID (--file FILE | --secret projects/P/secrets/S) [--dry-run]",
		"Make a key the one new tokens are signed with",
		`Make KID the signing key from now. The key active until now keeps verifying
and the ring records when it stopped signing, which retire needs.`,
		`  servo keys activate k2 --file ring.json`,
		auth.Activate, nil)
}

func newKeysRetireCmd() *cobra.Command {
	var force bool
	var self *cobra.Command
	grace := defaultRetireGrace
	return ringCmd("retire KID (--file FILE | --secret projects/P/secrets/S) [--dry-run] [--grace D] [--force]",
		"Remove a key once no token it signed can still be valid",
		`Remove KID from the ring. Refused for the active key, and until --grace has
passed since KID stopped signing (the default covers a running instance's
5-minute re-read, a retry scheduled up to 24 h ahead and a token's 2 h
maximum lifetime); --force removes it anyway, failing the callbacks of
every task still holding a token it signed.`,
		`  servo keys retire k1 --file ring.json
  servo keys retire k1 --secret projects/my-project/secrets/servo-token-keys --dry-run`,
		func(r auth.Ring, kid string, now time.Time) (auth.Ring, error) {
			out, err := auth.Retire(r, kid, now, grace, force)
			if err == nil && force {
				if _, early := auth.Retire(r, kid, now, grace, false); early != nil {
					fmt.Fprintf(self.ErrOrStderr(), "servo keys: --force: retiring %s although %v\n"+
						"servo keys: callbacks with tokens it signed will get 401 invalid_token\n", kid, early)
				}
			}
			return out, err
		},
		func(cmd *cobra.Command) {
			self = cmd
			cmd.Flags().DurationVar(&grace, "grace", defaultRetireGrace, "how long after the key stopped signing it may be retired")
			cmd.Flags().BoolVar(&force, "force", false, "retire even while tokens signed with the key may be valid")
		})
}
