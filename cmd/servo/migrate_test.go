package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/servo-dev/servo/emulator/emulatortest"
	"github.com/servo-dev/servo/internal/store"
)

// servo migrate against the emulator: a dry run writes nothing, a run
// records the schema, a rerun has nothing to do.
func TestMigrateCommand(t *testing.T) {
	project := emulatortest.ProjectID(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dry-run"}, fmt.Sprintf("schema 0 → %d (dry run: nothing written)", store.SchemaVersion)},
		{nil, fmt.Sprintf("schema 0 → %d\n", store.SchemaVersion)},
		{nil, fmt.Sprintf("schema %d: up to date", store.SchemaVersion)},
	} {
		out, errOut, code := runCLI(t, append([]string{"migrate", "--project", project}, tc.args...)...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Fatalf("servo migrate %v: exit %d\n%s%s\nwant %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if _, errOut, code := runCLI(t, "migrate", "--project", ""); code != exitUsage || !strings.Contains(errOut, "--project") {
		t.Fatalf("no project: exit %d %s", code, errOut)
	}
}
