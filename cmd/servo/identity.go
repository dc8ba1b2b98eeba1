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
	raw := os.Getenv(auth.DevKeyEnv)
	if raw == "" {
		return nil, usageErr("--as needs $%s: run the export line servo dev printed", auth.DevKeyEnv)
	}
	key, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(key) < 16 {
		return nil, usageErr("$%s is not a dev identity key (base64url, as servo dev prints it)", auth.DevKeyEnv)
	}
	tok, err := auth.SignDev(key, asEmail, time.Now(), auth.DevTokenTTL)
	if err != nil {
		return nil, fmt.Errorf("--as: %w", err)
	}
	c.SetBearer(tok)
	return c, nil
}
