package store_test

import (
	"context"
	"testing"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/store/storetest"
)

var _ storetest.Store = (*store.Store)(nil)

// TestConformance runs the store conformance suite against the Firestore
// store on the emulator, in strict mode (production's index and limit
// rules), each store on a project of its own.
func TestConformance(t *testing.T) {
	open := func(t *testing.T, project string, cfg storetest.Config) storetest.Store {
		t.Helper()
		opts := []store.Option{store.WithStrict(true)}
		if cfg.Quotas != nil {
			opts = append(opts, store.WithQuotas(cfg.Quotas))
		}
		s, err := store.New(context.Background(), project, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if !s.Strict() {
			t.Fatal("store.WithStrict(true) left strict mode off")
		}
		return s
	}
	storetest.Run(t, storetest.Opener{
		New: func(t *testing.T, cfg storetest.Config) storetest.Store {
			return open(t, emulatortest.ProjectID(t), cfg)
		},
		Same: func(t *testing.T, s storetest.Store) storetest.Store {
			st := s.(*store.Store)
			return open(t, st.Project(), storetest.Config{Quotas: st.Quotas()})
		},
	})
}
