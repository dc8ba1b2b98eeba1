package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/quota"
)

// devAccessFlags are servo dev's --access FILE and --quotas FILE: a real
// access policy (the default is open) and per-tenant and per-worker
// limits, read when the flag is parsed.
type devAccessFlags struct {
	policy *auth.Policy
	quotas *quota.Policy
}

func (d *devAccessFlags) register(f *pflag.FlagSet) {
	f.Var(fileFlag(func(path string) (err error) { d.policy, err = auth.ReadPolicyFile(path); return err }), "access",
		"access policy JSON file (default: open; try identities with servo --as EMAIL)")
	f.Var(fileFlag(func(path string) error {
		b, err := os.ReadFile(path)
		if err == nil {
			d.quotas, err = quota.Parse(b)
		}
		return err
	}), "quotas", "per-tenant and per-worker limits JSON file (maxRunning, maxQueued)")
}

// fileFlag is a flag whose value is a file read by load when set.
type fileFlag func(path string) error

func (f fileFlag) Set(path string) error {
	if err := f(path); err != nil {
		return fmt.Errorf("%w", err)
	}
	return nil
}
func (f fileFlag) String() string { return "" }
func (f fileFlag) Type() string   { return "FILE" }
