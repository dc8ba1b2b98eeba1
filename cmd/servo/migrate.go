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
	cmd := &cobra.Command{
		Use:   "migrate --project P [--database D] [--dry-run]",
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

Against the emulator when FIRESTORE_EMULATOR_HOST is set, else Google's
Firestore with Application Default Credentials (roles/datastore.user).`,
		Example: `  servo migrate --project my-project --dry-run
  servo migrate --project my-project --database servo-prod`,
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
				return nil
			}
			for _, p := range rep.Steps {
				fmt.Fprintf(out, "%-18s %d scanned, %d %s\n", p.Step, p.Scanned, p.Updated, verb)
			}
			if dryRun {
				fmt.Fprintf(out, "schema %d → %d (dry run: nothing written)\n", rep.From, rep.To)
			} else {
				fmt.Fprintf(out, "schema %d → %d\n", rep.From, rep.To)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&project, "project", firstNonEmpty(os.Getenv("SERVO_PROJECT"), os.Getenv("GOOGLE_CLOUD_PROJECT")), "Google Cloud project (default $SERVO_PROJECT, then $GOOGLE_CLOUD_PROJECT)")
	f.StringVar(&database, "database", firstNonEmpty(os.Getenv("SERVO_FIRESTORE_DATABASE"), "(default)"), "Firestore database id (default $SERVO_FIRESTORE_DATABASE, then (default))")
	f.BoolVar(&dryRun, "dry-run", false, "count what would change; write nothing")
	return cmd
}
