package main

import (
	"context"
	"flag"
	"os"

	"github.com/servo-dev/servo/emulator/cloudtasks"
)

func cmdEmulatorCloudTasks(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("emulator cloudtasks", flag.ContinueOnError)
	hostPort := fs.String("host-port", "127.0.0.1:8123", "address to listen on")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	return cloudtasks.Run(ctx, *hostPort, os.Stdout)
}
