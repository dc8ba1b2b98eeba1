package main

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	"github.com/spf13/cobra"

	_ "github.com/servo-dev/servo/functions" // the deployed entry points, registered by name
)

// deployedFunctions are the entry points package functions registers, as
// Terraform deploys them (entry_point).
var deployedFunctions = []string{"ServoAPI", "ServoCallbacks", "ServoClaim", "ServoJobs"}

// newDevFunctionCmd is `servo dev function NAME`: one deployed entry point
// served locally by the Functions Framework, built from the environment
// as in production, for the runbook's rehearsal of a function that cannot
// start.
func newDevFunctionCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "function " + strings.Join(deployedFunctions, "|") + " [--addr HOST:PORT]",
		Short: "Serve one deployed function's entry point locally, configured from the environment, until Ctrl-C",
		Long: `Serve one of the functions Terraform deploys (its entry point, package
functions) on --addr with the Functions Framework, as Cloud Run runs it:
its dependencies are built from the environment (SERVO_PROJECT,
SERVO_TOKEN_KEYS or SERVO_TOKEN_KEYS_SECRET, SERVO_CALLBACK_BASE_URL, the
*_EMULATOR_HOST variables: docs/configuration.md) on the first request,
and while they cannot be, every request is answered 503 with the code of
what to fix (misconfigured, secret_unavailable, unavailable). For the
runbook's rehearsal of "A configuration or secret error"; servo dev
itself serves everything on one address.`,
		Example: `  SERVO_PROJECT=servo-local SERVO_CALLBACK_BASE_URL=http://127.0.0.1:8080 \
    SERVO_TOKEN_KEYS_SECRET=projects/servo-local/secrets/servo-token-keys \
    servo dev function ServoAPI --addr 127.0.0.1:8090`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(deployedFunctions, args[0]) {
				return usageErr("unknown function %q: name one of %s", args[0], strings.Join(deployedFunctions, ", "))
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return usageErr("--addr %q: want HOST:PORT", addr)
			}
			// The framework serves the function FUNCTION_TARGET names.
			os.Setenv("FUNCTION_TARGET", args[0])
			fmt.Fprintf(cmd.ErrOrStderr(), "servo dev function: %s on http://%s (its dependencies are built on the first request); Ctrl-C to stop\n", args[0], addr)
			errc := make(chan error, 1)
			go func() { errc <- funcframework.StartHostPort(host, port) }()
			select {
			case err := <-errc:
				return fmt.Errorf("serve %s: %w", args[0], err)
			case <-cmd.Context().Done():
				return nil
			}
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8090", "address to listen on")
	return cmd
}
