package main

import (
	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/emulator/cloudtasks"
)

func newEmulatorCmd() *cobra.Command {
	return group("emulator", "Run an emulator on its own", "  servo emulator cloudtasks --host-port 127.0.0.1:8123", newEmulatorCloudTasksCmd())
}

func newEmulatorCloudTasksCmd() *cobra.Command {
	var hostPort string
	cmd := &cobra.Command{
		Use:   "cloudtasks [--host-port HOST:PORT]",
		Short: "Run Servo's Cloud Tasks emulator alone, until Ctrl-C",
		Long: `Run Servo's Cloud Tasks emulator (emulator/cloudtasks) on its own, until
Ctrl-C: the Cloud Tasks gRPC API, delivering tasks over HTTP to their URLs.
servo dev starts one itself; this is for other stacks and tests.`,
		Example: `  servo emulator cloudtasks
  servo emulator cloudtasks --host-port 127.0.0.1:9000`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cloudtasks.Run(cmd.Context(), hostPort, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&hostPort, "host-port", "127.0.0.1:8123", "address to listen on")
	return cmd
}
