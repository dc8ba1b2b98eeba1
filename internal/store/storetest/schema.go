package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/servo-dev/servo/internal/store"
)

func testSchema(t *testing.T, o Opener) {
	t.Run("Fresh", func(t *testing.T) { testSchemaFresh(t, o) })
	t.Run("DataWithoutSchema", func(t *testing.T) { testSchemaUnrecorded(t, o) })
}

// A fresh database's CheckSchema records store.SchemaVersion, once: the
// next check, from any instance, reads that record, and Migrate (dry or
// not) finds nothing to do and writes nothing. Tasks written since do not
// change the verdict.
func testSchemaFresh(t *testing.T, o Opener) {
	s := o.New(t, Config{})
	ctx := t.Context()
	sc, err := s.CheckSchema(ctx)
	if err != nil {
		t.Fatalf("check a fresh database: %v", err)
	}
	if sc.Version != store.SchemaVersion || sc.Step != "" {
		t.Fatalf("fresh database: schema %d step %q, want %d and no step", sc.Version, sc.Step, store.SchemaVersion)
	}
	recorded, err := s.ReadSchema(ctx)
	if err != nil || recorded.Version != store.SchemaVersion || recorded.UpdatedAt.IsZero() {
		t.Fatalf("recorded schema %+v, %v; want version %d recorded", recorded, err, store.SchemaVersion)
	}
	same := func(what string, sc store.Schema) {
		t.Helper()
		if sc.Version != recorded.Version || sc.Step != recorded.Step || !sc.UpdatedAt.Equal(recorded.UpdatedAt) {
			t.Fatalf("%s: schema %+v, want the record %+v unchanged", what, sc, recorded)
		}
	}
	other := o.Same(t, s)
	again, err := other.CheckSchema(ctx)
	if err != nil {
		t.Fatalf("check from another instance: %v", err)
	}
	same("check from another instance", again)

	for _, dry := range []bool{true, false} {
		rep, err := s.Migrate(ctx, store.MigrateOptions{DryRun: dry})
		if err != nil {
			t.Fatalf("migrate (dry run %v) a database at the current schema: %v", dry, err)
		}
		if rep.From != store.SchemaVersion || rep.To != store.SchemaVersion || len(rep.Steps) != 0 {
			t.Fatalf("migrate (dry run %v): %+v, want from %d to %d with no step", dry, rep, store.SchemaVersion, store.SchemaVersion)
		}
		after, err := s.ReadSchema(ctx)
		if err != nil {
			t.Fatal(err)
		}
		same("after a no-op migrate", after)
	}

	now := time.Now().UTC()
	tk := mustCreate(t, s, submitted(now, "acme", ""), now)
	sc, err = other.CheckSchema(ctx)
	if err != nil {
		t.Fatalf("check a database with a task: %v", err)
	}
	same("after a task was written", sc)
	if got := mustGetTask(t, other, tk.ID); got.ID != tk.ID {
		t.Fatalf("read %s, want %s", got.ID, tk.ID)
	}
}

// A database holding data but no schema record may hold an older layout:
// CheckSchema refuses it (store.ErrSchemaTooOld) and records nothing;
// Migrate brings it to store.SchemaVersion, after which CheckSchema
// accepts it and its task still reads and moves.
func testSchemaUnrecorded(t *testing.T, o Opener) {
	s := o.New(t, Config{})
	ctx := t.Context()
	now := time.Now().UTC()
	tk := mustCreate(t, s, submitted(now, "acme", ""), now)
	if _, err := s.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaTooOld) {
		t.Fatalf("check a database with data and no schema: %v, want store.ErrSchemaTooOld", err)
	}
	if sc, err := s.ReadSchema(ctx); err != nil || sc.Version != 0 {
		t.Fatalf("a refused check recorded schema %+v (%v)", sc, err)
	}
	rep, err := s.Migrate(ctx, store.MigrateOptions{})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if rep.To != store.SchemaVersion {
		t.Fatalf("migrate: %+v, want to %d", rep, store.SchemaVersion)
	}
	sc, err := s.CheckSchema(ctx)
	if err != nil || sc.Version != store.SchemaVersion {
		t.Fatalf("check after migrate: %+v, %v", sc, err)
	}
	mustAccept(t, s, tk.ID, enqueued(1, now))
	if got := mustGetTask(t, s, tk.ID); got.ID != tk.ID {
		t.Fatalf("after migrate, read %s, want %s", got.ID, tk.ID)
	}
	checkOutbox(t, s, tk.ID)
}
