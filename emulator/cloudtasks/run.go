package cloudtasks

import (
	"context"
	"fmt"
	"io"
	"log/slog"
)

// defaultHostPort is where `servo emulator cloudtasks` listens by default.
const defaultHostPort = "127.0.0.1:8123"

// Run is what `servo emulator cloudtasks --host-port HOST:PORT` calls: it
// starts an emulator on hostPort ("" means defaultHostPort), prints
// "export CLOUD_TASKS_EMULATOR_HOST=host:port" to w, serves until ctx is
// done, then stops the emulator and returns nil.
func Run(ctx context.Context, hostPort string, w io.Writer) error {
	if hostPort == "" {
		hostPort = defaultHostPort
	}
	s := NewServer(Options{Logger: slog.Default()})
	addr, err := s.Start(hostPort)
	if err != nil {
		return fmt.Errorf("cloudtasks emulator: %w", err)
	}
	defer s.Stop()
	if _, err := fmt.Fprintf(w, "export %s=%s\n", EnvVar, addr); err != nil {
		return fmt.Errorf("cloudtasks emulator: write address: %w", err)
	}
	slog.Info("cloudtasks emulator: serving", "addr", addr)
	<-ctx.Done()
	return nil
}
