package main

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
)

// openBrowser opens u in the default browser (servo dev --open): open on
// macOS, xdg-open elsewhere. A failure is reported, not fatal.
func openBrowser(u string, errOut io.Writer) {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	cmd := exec.Command(name, u)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(errOut, "servo dev: could not open the dashboard with %s: %v (open %s yourself)\n", name, err, u)
		return
	}
	go func() { _ = cmd.Wait() }()
}
