package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Wildcard names every tenant (in a grant) or every authenticated principal.
const Wildcard = "*"

// Role is what a principal may do on a tenant; roles are ordered, each
// including the ones before it.
type Role int

// Roles.
const (
	NoRole Role = iota
	Viewer
	Submitter
	Operator
)

var roleNames = map[Role]string{NoRole: "none", Viewer: "viewer", Submitter: "submitter", Operator: "operator"}

func (r Role) String() string { return roleNames[r] }

// ParseRole parses "viewer", "submitter" or "operator".
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if r != NoRole && n == s {
			return r, nil
		}
	}
	return NoRole, fmt.Errorf("%w: role %q: want viewer, submitter or operator", ErrInvalidPolicy, s)
}

// Action is what a request does; each needs a role.
type Action int

// Actions.
const (
	// View: get, list, counts, events, runs, usage.
	View Action = iota
	// Submit: POST /v1/tasks and :batch.
	Submit
	// Operate: cancel (a task or a run) and rerun.
	Operate
)

// Needs is the role an action needs.
func (a Action) Needs() Role {
	switch a {
	case Submit:
		return Submitter
	case Operate:
		return Operator
	}
	return Viewer
}

func (a Action) String() string { return [...]string{"view", "submit", "operate"}[a] }

// ErrInvalidPolicy reports a policy that cannot be used.
var ErrInvalidPolicy = errors.New("access: invalid policy")

// Policy maps principals to roles per tenant. The nil *Policy and OpenPolicy()
// allow everything (the control API is then protected by IAM alone).
type Policy struct {
	open   bool
	grants map[string]map[string]Role // principal → tenant → role
}

// OpenPolicy returns the policy that allows every request, with or without
// an identity: servo dev's default, and a deployment's without
// SERVO_ACCESS.
func OpenPolicy() *Policy { return &Policy{open: true} }

// IsOpen reports whether p allows everything.
func (p *Policy) IsOpen() bool { return p == nil || p.open }

// policyJSON is the configuration format:
//
//	{"principals": {"alice@example.com": {"acme": "operator", "*": "viewer"},
//	                "ci@proj.iam.gserviceaccount.com": {"acme": "submitter"}}}
type policyJSON struct {
	Principals map[string]map[string]string `json:"principals"`
}

// ParsePolicy reads a policy from JSON; unknown fields, roles and empty
// names are errors. A policy with no principal allows nothing.
func ParsePolicy(data []byte) (*Policy, error) {
	var pj policyJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pj); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	p := &Policy{grants: map[string]map[string]Role{}}
	for who, tenants := range pj.Principals {
		if strings.TrimSpace(who) == "" || (who != Wildcard && !strings.Contains(who, "@")) {
			return nil, fmt.Errorf("%w: principal %q: want an e-mail address or %q", ErrInvalidPolicy, who, Wildcard)
		}
		m := map[string]Role{}
		for tenant, role := range tenants {
			if strings.TrimSpace(tenant) == "" || len(tenant) > 128 {
				return nil, fmt.Errorf("%w: principal %q: tenant %q: want 1 to 128 bytes or %q", ErrInvalidPolicy, who, tenant, Wildcard)
			}
			r, err := ParseRole(role)
			if err != nil {
				return nil, fmt.Errorf("principal %q, tenant %q: %w", who, tenant, err)
			}
			m[tenant] = r
		}
		p.grants[strings.ToLower(who)] = m
	}
	return p, nil
}

// LoadPolicy reads the policy from the JSON in env (SERVO_ACCESS) or the
// file named by fileEnv (SERVO_ACCESS_FILE). Neither set returns nil: the
// caller decides (the deployed API is then open, behind IAM).
func LoadPolicy(getenv func(string) string, env, fileEnv string) (*Policy, error) {
	data := getenv(env)
	if data == "" && getenv(fileEnv) != "" {
		b, err := os.ReadFile(getenv(fileEnv))
		if err != nil {
			return nil, fmt.Errorf("access: %s: %w", fileEnv, err)
		}
		data = string(b)
	}
	if strings.TrimSpace(data) == "" {
		return nil, nil
	}
	p, err := ParsePolicy([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env, err)
	}
	return p, nil
}

// ReadPolicyFile reads a policy file (servo dev --access).
func ReadPolicyFile(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	p, err := ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Role is principal's role on tenant: the highest of its grants for the
// tenant and for "*", and of the grants of the "*" principal. The empty
// principal (no identity) has none.
func (p *Policy) Role(principal, tenant string) Role {
	if p.IsOpen() {
		return Operator
	}
	if principal == "" {
		return NoRole
	}
	best := NoRole
	for _, who := range []string{strings.ToLower(principal), Wildcard} {
		g := p.grants[who]
		best = max(best, g[tenant], g[Wildcard])
	}
	return best
}

// Allows reports whether principal may do a on tenant's tasks.
func (p *Policy) Allows(principal, tenant string, a Action) bool {
	return p.Role(principal, tenant) >= a.Needs()
}

// PermissionError is a request Policy.Check refused. Its text names the
// caller, the action and the role it needs but never the tenant: a caller
// asking for another tenant's task by id learns nothing of it.
type PermissionError struct {
	// Principal is the caller, "" when anonymous.
	Principal string
	Action    Action
}

func (e *PermissionError) Error() string {
	who := e.Principal
	if who == "" {
		who = "the anonymous caller"
	}
	return fmt.Sprintf("%s may not %s this tenant's tasks (needs the %s role)", who, e.Action, e.Action.Needs())
}

// Check returns nil when principal may do a on tenant's tasks, else a
// *PermissionError.
func (p *Policy) Check(principal, tenant string, a Action) error {
	if p.Allows(principal, tenant, a) {
		return nil
	}
	return &PermissionError{Principal: principal, Action: a}
}

// Tenants returns where principal may do a: all is true when it may on
// every tenant (a grant on "*"); otherwise tenants lists the tenants it
// may, sorted (empty: none). Lists use it to filter in the query.
func (p *Policy) Tenants(principal string, a Action) (all bool, tenants []string) {
	if p.IsOpen() {
		return true, nil
	}
	if principal == "" {
		return false, nil
	}
	for _, who := range []string{strings.ToLower(principal), Wildcard} {
		for tenant, r := range p.grants[who] {
			if r < a.Needs() {
				continue
			}
			if tenant == Wildcard {
				return true, nil
			}
			if !slices.Contains(tenants, tenant) {
				tenants = append(tenants, tenant)
			}
		}
	}
	slices.Sort(tenants)
	return false, tenants
}
