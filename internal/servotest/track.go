package servotest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TrackFiles stats every file below root whose name ends in ext, so that
// go test's result cache, which sees only the files the test binary itself
// opens or stats, reruns the test when one changes: for tests that hand
// such files to another program (Python, say). It fails the test if root
// holds none.
func TrackFiles(tb testing.TB, root, ext string) {
	tb.Helper()
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ext) {
			return nil
		}
		if _, err := os.Stat(path); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		tb.Fatalf("servotest: track %s files below %s: %v", ext, root, err)
	}
	if n == 0 {
		tb.Fatalf("servotest: no %s file below %s", ext, root)
	}
}
