package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/internal/auth"
)

// asEmail is the global --as flag: act as this principal against the
// local stack, with a dev identity token signed with the key servo dev
// printed ($SERVO_DEV_IDENTITY_KEY).
var asEmail string

// addAsFlag registers --as on the root command.
func addAsFlag(root *cobra.Command) {
	root.PersistentFlags().StringVar(&asEmail, "as", "", "act as this e-mail against the local stack (servo dev; needs $"+auth.DevKeyEnv+")")
}

// withIdentity gives c the dev identity of --as, if set.
func withIdentity(_ context.Context, c *client.Client) (*client.Client, error) {
	if asEmail == "" {
		return c, nil
	}
	tok, err := devToken()
	if err != nil {
		return nil, err
	}
	c.SetBearer(tok)
	return c, nil
}

// devToken is the dev identity token of --as.
func devToken() (string, error) {
	raw := os.Getenv(auth.DevKeyEnv)
	if raw == "" {
		return "", usageErr("--as needs $%s: run the export line servo dev printed", auth.DevKeyEnv)
	}
	key, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(key) < 16 {
		return "", usageErr("$%s is not a dev identity key (base64url, as servo dev prints it)", auth.DevKeyEnv)
	}
	tok, err := auth.SignDev(key, asEmail, time.Now(), auth.DevTokenTTL)
	if err != nil {
		return "", fmt.Errorf("--as: %w", err)
	}
	return tok, nil
}

// newTokenCmd is servo --as EMAIL token: it prints the dev identity
// token of EMAIL, to sign in to the dashboard of servo dev --access.
func newTokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "Print the dev identity token of --as (sign in to servo dev's dashboard)",
		Long: `Print the dev identity token of --as EMAIL, signed with $SERVO_DEV_IDENTITY_KEY
(valid 10 minutes): paste it into the sign-in page of the dashboard of
servo dev --access FILE to see what EMAIL's roles allow.`,
		Example: `  servo --as alice@example.com token`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if asEmail == "" {
				return usageErr("servo token needs --as EMAIL")
			}
			tok, err := devToken()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
}
