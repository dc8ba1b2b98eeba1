package main

import (
	"fmt"

	"github.com/servo-dev/servo/api"
	"github.com/spf13/cobra"
)

func newUsageCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "usage TENANT",
		Short: "Show a tenant's running and queued tasks and its limits",
		Long: `Show a tenant's usage (GET /v1/tenants/{tenant}/usage): the tasks holding a
run slot (RUNNING or CANCELLING, and for a limited tenant those enqueued to
their worker and not yet started), the tasks PENDING or QUEUED, and the
tenant's maxRunning and maxQueued (0: unlimited).`,
		Example: `  servo usage acme
  servo usage acme --json
  servo --as alice@example.com usage acme   # against servo dev --access FILE`,
		Args: exactArgs("TENANT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.client(ctx)
			if err != nil {
				return err
			}
			var u api.UsageResponse
			raw, err := c.Usage(ctx, args[0], &u)
			if err != nil {
				return apiErr(err)
			}
			w := cmd.OutOrStdout()
			if cf.json {
				return printJSON(w, raw)
			}
			limit := func(n int) string {
				if n == 0 {
					return "unlimited"
				}
				return fmt.Sprint(n)
			}
			fmt.Fprintf(w, "Tenant:   %s\nRunning:  %d (max %s)\nQueued:   %d (max %s)\n", u.TenantID,
				u.Running, limit(u.Limits.MaxRunning), u.Queued, limit(u.Limits.MaxQueued))
			return nil
		},
	}
	cf.register(cmd.Flags())
	return cmd
}
