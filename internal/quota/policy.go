package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
)

// Any is the tenant name whose limits apply to every tenant not named.
const Any = "*"

// DefaultShards is how many counter shards a limited scope uses at most.
const DefaultShards = 4

// MaxShards bounds Policy.Shards.
const MaxShards = 64

// The shard count of a scope with a declared peak rate (Limits.PeakRate,
// docs/tenants.md "Counters sized to the rate"):
// ceil(PeakRate × WritesPerTask / DocWritesPerSecond), at most
// MaxRateShards and at most its smallest limit / MinShare.
const (
	// WritesPerTask is how many counter writes one task of a scope makes
	// on average: admitted (queued+1, running+1 on one shard when its own
	// has the slot), started (queued−1) and ended (running−1) are three,
	// and a retry (a failure, a lapsed lease), a cancel and a wait for a
	// slot add more. The scale model's recording (bench/scale, a task mix
	// with one in ten failing, one in ten cancelled and one in ten
	// lapsing) measures 4.7 a task in a limited scope; it holds this
	// figure against its recording (TestQuotaWritesPerTask) and exits 1
	// when a scope's tasks make more.
	WritesPerTask = 5
	// DocWritesPerSecond is the sustained write rate Firestore's best
	// practices give for one document.
	DocWritesPerSecond = 1.0
	// MinShare is the least share of each limit a shard of a rate-sized
	// scope owns: a scope whose limit is small gets fewer shards (and
	// sustains less than its peak rate) rather than shards of one slot.
	MinShare = 2
	// MaxRateShards bounds the shard count of a rate-sized scope.
	// MaxPeakRate × WritesPerTask fits under it.
	MaxRateShards = 262144
	// MaxPeakRate bounds Limits.PeakRate (tasks/s): a tenant at 30 % of
	// 50 000 tasks/s declares twice its rate (docs/scale.md).
	MaxPeakRate = 50000
)

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
	// PeakRate is the most tasks per second the scope is expected to
	// admit, sustained; when set, it sizes the scope's counter shards
	// (ShardsFor) so that no shard is written more than about once a
	// second. 0 keeps the policy's Shards.
	PeakRate float64 `json:"peakRate,omitempty"`
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
	// Shards is the most counter shards of one scope without a PeakRate
	// (default DefaultShards); such a scope uses min(Shards, its smallest
	// limit), so that every shard has a share of each limit. A scope with
	// a PeakRate is sized to it instead (ShardsFor).
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
			return Limits{MaxRunning: l.MaxRunning, MaxQueued: l.MaxQueued, PeakRate: l.PeakRate}
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

// ShardsFor is the number of counter shards of a scope with limits l.
// Without a PeakRate: at most p.Shards (default DefaultShards) and at most
// its smallest non-zero limit. With one: enough that each shard takes
// about DocWritesPerSecond at that rate, ceil(PeakRate × WritesPerTask /
// DocWritesPerSecond), at most MaxRateShards and at most its smallest
// limit / MinShare, so that every shard owns at least MinShare of each
// limit. Always at least 1.
func (p *Policy) ShardsFor(l Limits) int {
	n, minShare := DefaultShards, 1
	if p != nil && p.Shards > 0 {
		n = p.Shards
	}
	if l.PeakRate > 0 {
		n = min(int(math.Ceil(l.PeakRate*WritesPerTask/DocWritesPerSecond)), MaxRateShards)
		minShare = MinShare
	}
	for _, v := range []int{l.MaxRunning, l.MaxQueued} {
		if v > 0 && v/minShare < n {
			n = v / minShare
		}
	}
	return max(n, 1)
}

// Sustained is the admission rate (tasks/s) a scope with limits l holds
// with every counter shard at DocWritesPerSecond: below l.PeakRate when
// its limits capped its shard count.
func (p *Policy) Sustained(l Limits) float64 {
	return float64(p.ShardsFor(l)) * DocWritesPerSecond / WritesPerTask
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

// ErrInvalid reports a policy that Validate refused; the error is an
// *InvalidError.
var ErrInvalid = errors.New("quota: invalid policy")

// InvalidError is a policy field that Validate refused.
type InvalidError struct {
	// Field is the field's JSON path, e.g. tenants["acme"].peakRate.
	Field string
	// Reason says what is wrong and what is accepted.
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalid, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// validRate reports whether r is a PeakRate Validate accepts.
func validRate(r float64) bool { return r >= 0 && r <= MaxPeakRate } // false for NaN

// Validate checks the policy's limits and names; an error is an
// *InvalidError naming the field.
func (p *Policy) Validate() error {
	if p.Shards < 0 || p.Shards > MaxShards {
		return invalid("shards", "%d: want 0 (default %d) to %d", p.Shards, DefaultShards, MaxShards)
	}
	for _, kind := range []Kind{KindTenant, KindWorker} {
		m, field := p.Tenants, "tenants"
		if kind == KindWorker {
			m, field = p.Workers, "workers"
		}
		for _, name := range slices.Sorted(maps.Keys(m)) {
			l, f := m[name], fmt.Sprintf("%s[%q]", field, name)
			if strings.TrimSpace(name) == "" || len(name) > 128 {
				return invalid(f, "%s name: want 1 to 128 bytes", kind)
			}
			if kind == KindWorker && name == Any {
				return invalid(f, "%q is only allowed for tenants", Any)
			}
			if l.MaxRunning < 0 {
				return invalid(f+".maxRunning", "%d: must be ≥ 0 (0 is unlimited)", l.MaxRunning)
			}
			if l.MaxQueued < 0 {
				return invalid(f+".maxQueued", "%d: must be ≥ 0 (0 is unlimited)", l.MaxQueued)
			}
			if !validRate(l.PeakRate) {
				return invalid(f+".peakRate", "%v: want 0 (shards from \"shards\") to %d tasks/s", l.PeakRate, MaxPeakRate)
			}
			if l.RetentionDays != 0 && (kind != KindTenant || l.RetentionDays < MinRetentionDays) {
				return invalid(f+".retentionDays", "%d: want a tenant's, at least %d (the idempotency window)", l.RetentionDays, MinRetentionDays)
			}
			if pt := l.PerTenant; pt != nil {
				f += ".perTenant"
				switch {
				case kind != KindWorker:
					return invalid(f, "only allowed for workers")
				case pt.PerTenant != nil:
					return invalid(f+".perTenant", "not allowed")
				case pt.RetentionDays != 0:
					return invalid(f+".retentionDays", "not allowed (a tenant's retention)")
				case pt.MaxRunning < 0:
					return invalid(f+".maxRunning", "%d: must be ≥ 0", pt.MaxRunning)
				case pt.MaxQueued < 0:
					return invalid(f+".maxQueued", "%d: must be ≥ 0", pt.MaxQueued)
				case !validRate(pt.PeakRate):
					return invalid(f+".peakRate", "%v: want 0 to %d tasks/s", pt.PeakRate, MaxPeakRate)
				case l.MaxRunning > 0 && pt.MaxRunning > l.MaxRunning:
					return invalid(f+".maxRunning", "%d exceeds the worker's own maxRunning %d", pt.MaxRunning, l.MaxRunning)
				case l.MaxQueued > 0 && pt.MaxQueued > l.MaxQueued:
					return invalid(f+".maxQueued", "%d exceeds the worker's own maxQueued %d", pt.MaxQueued, l.MaxQueued)
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
