package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
)

// TestWriteRecorderNamesCauseAndCode: a commit made under store.WithCause
// carries its cause; one without names the code that made it (the first
// caller outside the store), which the scale model reports when it cannot
// attribute the write.
func TestWriteRecorderNamesCauseAndCode(t *testing.T) {
	rec := store.NewWriteRecorder()
	s, err := store.New(context.Background(), emulatortest.ProjectID(t), store.WithClientOptions(rec.ClientOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Now().UTC()
	if _, err := s.Pulse(store.WithCause(context.Background(), "sweeper"), now, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pulse(context.Background(), now.Add(time.Second), time.Second); err != nil {
		t.Fatal(err)
	}
	w := rec.Writes()
	if len(w) != 2 {
		t.Fatalf("%d writes recorded, want 2: %+v", len(w), w)
	}
	if w[0].Cause != "sweeper" || w[1].Cause != "" {
		t.Errorf("causes %q and %q, want sweeper and none", w[0].Cause, w[1].Cause)
	}
	if !strings.Contains(w[1].Path, "TestWriteRecorderNamesCauseAndCode") {
		t.Errorf("path %q, want the test that committed", w[1].Path)
	}
}
