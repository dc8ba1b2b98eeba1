package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/internal/store"
)

func newMigrateCmd() *cobra.Command {
	var project, database string
	var dryRun bool
	var dueShards int
	cmd := &cobra.Command{
		Use:   "migrate --project P [--database D] [--dry-run] [--due-shards N]",
		Short: "Bring a deployment's Firestore data to this build's layout",
		Long: `Migrate brings data written by any earlier layout of Servo to this build's
(schema version ` + fmt.Sprint(store.SchemaVersion) + `, recorded in meta/schema): it adds the fields
and documents that later layouts read (due shards, the outbox's next try,
runs' documents, the retention's expireAt) and moves tasks and runs to
their hash-prefixed names (schemas 2 and 4; docs/operations.md says in
which order to deploy and migrate). It is idempotent, resumable (an interrupted run goes
on where it stopped) and safe while Servo runs: it only adds what is
missing, each write conditional on the version of the document it read. It
reads every task, attempt record, run document and outbox entry once. Run
it before every deploy, with the new build; the functions refuse to start
against a schema older or newer than they know. A database that holds
data but no schema and none of Servo's collections is refused, nothing
written: the wrong project or database, most likely.

--due-shards N lowers the due shards the data uses to N, after the
schema: every task, outbox entry, schedule and run in a shard at or
above N moves to the shard its id hashes to among N (Terraform's
due_shards, the functions' SERVO_DUE_SHARDS, may grow freely; lowered,
the functions refuse to start while data sits above it, naming this
command). Run it after applying the lower due_shards: the functions,
refusing, write nothing meanwhile, and start on their next try once it
is done. Each move is conditional on the document it read; a rerun
resumes.

Against the emulator when FIRESTORE_EMULATOR_HOST is set, else Google's
Firestore with Application Default Credentials (roles/datastore.user).`,
		Example: `  servo migrate --project my-project --dry-run
  servo migrate --project my-project --database servo-prod
  servo migrate --project my-project --due-shards 128     # after lowering Terraform's due_shards to 128`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if project == "" {
				return usageErr("--project is required (or $SERVO_PROJECT)")
			}
			st, err := store.New(cmd.Context(), project, store.WithDatabase(database))
			if err != nil {
				return err
			}
			defer st.Close()
			out := cmd.OutOrStdout()
			verb := "updated"
			if dryRun {
				verb = "would update"
			}
			rep, err := st.Migrate(cmd.Context(), store.MigrateOptions{DryRun: dryRun, Progress: func(p store.MigrateProgress) {
				fmt.Fprintf(cmd.ErrOrStderr(), "servo migrate: %s: %d scanned, %d %s\n", p.Step, p.Scanned, p.Updated, verb)
			}})
			if err != nil {
				return err
			}
			if rep.From == rep.To && len(rep.Steps) == 0 {
				fmt.Fprintf(out, "schema %d: up to date\n", rep.To)
				return reshard(cmd, project, database, dueShards, dryRun, verb)
			}
			for _, p := range rep.Steps {
				fmt.Fprintf(out, "%-18s %d scanned, %d %s\n", p.Step, p.Scanned, p.Updated, verb)
			}
			if dryRun {
				fmt.Fprintf(out, "schema %d → %d (dry run: nothing written)\n", rep.From, rep.To)
			} else {
				fmt.Fprintf(out, "schema %d → %d\n", rep.From, rep.To)
			}
			return reshard(cmd, project, database, dueShards, dryRun, verb)
		},
	}
	f := cmd.Flags()
	f.StringVar(&project, "project", firstNonEmpty(os.Getenv("SERVO_PROJECT"), os.Getenv("GOOGLE_CLOUD_PROJECT")), "Google Cloud project (default $SERVO_PROJECT, then $GOOGLE_CLOUD_PROJECT)")
	f.StringVar(&database, "database", firstNonEmpty(os.Getenv("SERVO_FIRESTORE_DATABASE"), "(default)"), "Firestore database id (default $SERVO_FIRESTORE_DATABASE, then (default))")
	f.BoolVar(&dryRun, "dry-run", false, "count what would change; write nothing")
	f.IntVar(&dueShards, "due-shards", 0, "move the data into due shards [0, N): after lowering Terraform's due_shards to N (0: leave the shards as they are)")
	return cmd
}

// reshard is servo migrate's --due-shards: nothing when n is 0, else the
// data moved into shards [0, n) (store.Reshard).
func reshard(cmd *cobra.Command, project, database string, n int, dryRun bool, verb string) error {
	if n == 0 {
		return nil
	}
	if n < 0 {
		return usageErr("--due-shards must be at least 1")
	}
	st, err := store.New(cmd.Context(), project, store.WithDatabase(database), store.WithDueShards(n))
	if err != nil {
		return err
	}
	defer st.Close()
	out := cmd.OutOrStdout()
	inUse, err := st.DueShardsInUse(cmd.Context())
	if err != nil {
		return err
	}
	if inUse <= n {
		fmt.Fprintf(out, "due shards: the data uses %d, within %d: nothing to move\n", inUse, n)
		return nil
	}
	rep, err := st.Reshard(cmd.Context(), store.MigrateOptions{DryRun: dryRun, Progress: func(p store.MigrateProgress) {
		fmt.Fprintf(cmd.ErrOrStderr(), "servo migrate: %s: %d scanned, %d %s\n", p.Step, p.Scanned, p.Updated, verb)
	}})
	for _, p := range rep.Steps {
		fmt.Fprintf(out, "%-18s %d scanned, %d %s\n", p.Step, p.Scanned, p.Updated, verb)
	}
	if err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintf(out, "due shards %d → %d (dry run: nothing written)\n", inUse, n)
	} else {
		fmt.Fprintf(out, "due shards %d → %d\n", inUse, n)
	}
	return nil
}
