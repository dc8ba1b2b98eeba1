package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Any is the tenant name whose limits apply to every tenant not named.
const Any = "*"

// DefaultShards is how many counter shards a limited scope uses at most.
const DefaultShards = 4

// MaxShards bounds Policy.Shards.
const MaxShards = 64

// Limits are one scope's limits; zero means unlimited.
type Limits struct {
	// MaxRunning bounds the tasks holding a run slot: RUNNING or CANCELLING,
	// or enqueued to their worker and not yet started. Tasks past it stay
	// QUEUED, without a Cloud Task, until a slot frees.
	MaxRunning int `json:"maxRunning,omitempty"`
	// MaxQueued bounds the tasks PENDING or QUEUED; a submit past it is
	// refused (429 quota_exceeded).
	MaxQueued int `json:"maxQueued,omitempty"`
	// PerTenant, on a worker's limits, is each tenant's share of them: a
	// tenant may hold at most PerTenant.MaxRunning of the worker's run
	// slots and PerTenant.MaxQueued of its queued tasks, so that a tenant
	// over its share cannot take the rest from the others.
	PerTenant *Limits `json:"perTenant,omitempty"`
	// RetentionDays, on a tenant's limits, is how many days its ended
	// tasks, their attempts and runs are kept (at least MinRetentionDays,
	// the idempotency window); 0 is the deployment's default
	// (SERVO_RETENTION). It limits nothing.
	RetentionDays int `json:"retentionDays,omitempty"`
}

// MinRetentionDays is the shortest Limits.RetentionDays: the idempotency
// window.
const MinRetentionDays = 30

// Limited reports whether l limits anything.
func (l Limits) Limited() bool { return l.MaxRunning > 0 || l.MaxQueued > 0 }

// Kind is a scope's kind.
type Kind string

// Scope kinds.
const (
	KindTenant Kind = "tenant"
	KindWorker Kind = "worker"
	// KindShare is a tenant's share of a worker (Limits.PerTenant); its
	// scope name is ShareName(worker, tenant).
	KindShare Kind = "share"
)

// ShareName is the scope name of tenant's share of worker.
func ShareName(worker, tenant string) string { return worker + "\x00" + tenant }

// splitShare splits a ShareName.
func splitShare(name string) (worker, tenant string) {
	worker, tenant, _ = strings.Cut(name, "\x00")
	return worker, tenant
}

// Policy is the quota configuration: limits per tenant (Any for every
// other tenant) and per worker name. The zero Policy limits nothing.
type Policy struct {
	Tenants map[string]Limits `json:"tenants,omitempty"`
	Workers map[string]Limits `json:"workers,omitempty"`
	// Shards is the most counter shards of one scope (default
	// DefaultShards); a scope uses min(Shards, its smallest limit), so that
	// every shard has a share of each limit.
	Shards int `json:"shards,omitempty"`
}

// Enabled reports whether any scope is limited.
func (p *Policy) Enabled() bool {
	if p == nil {
		return false
	}
	for _, m := range []map[string]Limits{p.Tenants, p.Workers} {
		for _, l := range m {
			if l.Limited() || (l.PerTenant != nil && l.PerTenant.Limited()) {
				return true
			}
		}
	}
	return false
}

// For returns the limits of the scope (kind, name): its own, or for a
// tenant the Any entry, or none.
func (p *Policy) For(kind Kind, name string) Limits {
	if p == nil {
		return Limits{}
	}
	m := p.Tenants
	switch kind {
	case KindWorker:
		m = p.Workers
	case KindShare:
		w, _ := splitShare(name)
		if l := p.Workers[w].PerTenant; l != nil {
			return Limits{MaxRunning: l.MaxRunning, MaxQueued: l.MaxQueued}
		}
		return Limits{}
	}
	if l, ok := m[name]; ok {
		return l
	}
	if kind == KindTenant {
		return m[Any]
	}
	return Limits{}
}

// ShardsFor is the number of counter shards of a scope with limits l: at
// most p.Shards and at most its smallest non-zero limit (at least 1).
func (p *Policy) ShardsFor(l Limits) int {
	n := DefaultShards
	if p != nil && p.Shards > 0 {
		n = p.Shards
	}
	for _, v := range []int{l.MaxRunning, l.MaxQueued} {
		if v > 0 && v < n {
			n = v
		}
	}
	return max(n, 1)
}

// Share is shard k's part of limit over n shards (limit 0, unlimited, is
// 0): the parts differ by at most one and add up to limit. A shard index
// past n (the shard count shrank since the task was admitted) takes the
// share of k mod n.
func Share(limit, n, k int) int {
	if limit <= 0 || n <= 0 {
		return 0
	}
	k %= n
	s := limit / n
	if k < limit%n {
		s++
	}
	return s
}

// Fits reports whether a shard holding count of a limit's share may take
// one more: always when limit is 0 (unlimited).
func Fits(limit, n, k, count int) bool {
	return limit <= 0 || count < Share(limit, n, k)
}

// Parse reads a policy from JSON, rejecting unknown fields, negative
// limits and bad names.
func Parse(data []byte) (*Policy, error) {
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("quota: parse policy: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// ErrInvalid reports a policy that Validate refused.
var ErrInvalid = errors.New("quota: invalid policy")

// Validate checks the policy's limits and names.
func (p *Policy) Validate() error {
	if p.Shards < 0 || p.Shards > MaxShards {
		return fmt.Errorf("%w: shards %d: want 0 (default %d) to %d", ErrInvalid, p.Shards, DefaultShards, MaxShards)
	}
	for kind, m := range map[Kind]map[string]Limits{KindTenant: p.Tenants, KindWorker: p.Workers} {
		for name, l := range m {
			if strings.TrimSpace(name) == "" || len(name) > 128 {
				return fmt.Errorf("%w: %s name %q: want 1 to 128 bytes", ErrInvalid, kind, name)
			}
			if kind == KindWorker && name == Any {
				return fmt.Errorf("%w: workers: %q is only allowed for tenants", ErrInvalid, Any)
			}
			if l.MaxRunning < 0 || l.MaxQueued < 0 {
				return fmt.Errorf("%w: %s %q: limits must be ≥ 0 (0 is unlimited)", ErrInvalid, kind, name)
			}
			if l.RetentionDays != 0 && (kind != KindTenant || l.RetentionDays < MinRetentionDays) {
				return fmt.Errorf("%w: %s %q: retentionDays %d: want a tenant's, at least %d (the idempotency window)", ErrInvalid, kind, name, l.RetentionDays, MinRetentionDays)
			}
			if pt := l.PerTenant; pt != nil {
				switch {
				case kind != KindWorker:
					return fmt.Errorf("%w: %s %q: perTenant is only allowed for workers", ErrInvalid, kind, name)
				case pt.PerTenant != nil || pt.MaxRunning < 0 || pt.MaxQueued < 0 || pt.RetentionDays != 0:
					return fmt.Errorf("%w: worker %q: perTenant: want maxRunning and maxQueued ≥ 0", ErrInvalid, name)
				case (l.MaxRunning > 0 && pt.MaxRunning > l.MaxRunning) || (l.MaxQueued > 0 && pt.MaxQueued > l.MaxQueued):
					return fmt.Errorf("%w: worker %q: perTenant exceeds the worker's own limits", ErrInvalid, name)
				}
			}
		}
	}
	return nil
}

// Load reads the policy from the JSON in env (SERVO_QUOTAS) or, when it
// is empty, from the file named by fileEnv (SERVO_QUOTAS_FILE); neither
// set means no quota.
func Load(getenv func(string) string, env, fileEnv string) (*Policy, error) {
	data := getenv(env)
	if data == "" && getenv(fileEnv) != "" {
		b, err := os.ReadFile(getenv(fileEnv))
		if err != nil {
			return nil, fmt.Errorf("quota: %s: %w", fileEnv, err)
		}
		data = string(b)
	}
	if strings.TrimSpace(data) == "" {
		return &Policy{}, nil
	}
	p, err := Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", env, err)
	}
	return p, nil
}
