package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A RingSource reads the stored form of a key ring (see [Ring]): a file, a
// Secret Manager secret's latest version.
type RingSource func(ctx context.Context) ([]byte, error)

// RingFileSource reads the ring from the file at path.
func RingFileSource(path string) RingSource {
	return func(context.Context) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("token: key ring file: %w", err)
		}
		return b, nil
	}
}

// Reloading rings: when they re-read their source.
const (
	// DefaultRefresh is how often a reloading ring re-reads its source
	// while in use, so that a newly activated key signs everywhere within
	// this time.
	DefaultRefresh = 5 * time.Minute
	// MissReloadGap is the least time between two re-reads caused by
	// tokens with an unknown kid (which anyone can send).
	MissReloadGap = time.Second
	// reloadTimeout bounds one re-read.
	reloadTimeout = 10 * time.Second
	// refreshRetry is the wait after a failed background refresh.
	refreshRetry = 30 * time.Second
)

// liveRing is the state of a reloading KeyRing.
type liveRing struct {
	src     RingSource
	refresh time.Duration
	now     func() time.Time // time.Now unless a test sets it

	cur         atomic.Pointer[KeyRing] // a static ring
	refreshing  atomic.Bool
	nextRefresh atomic.Int64 // UnixNano of the next background re-read

	mu       sync.Mutex // serialises re-reads; guards the fields below
	lastMiss time.Time
	reloads  int // successful re-reads (tests)
	lastErr  error
}

// NewReloadingKeyRing returns a ring read from src that re-reads src when
// a token names a kid it does not hold (at most once per MissReloadGap)
// and, while the ring is used, every refresh (DefaultRefresh when 0) in the
// background. initial, when not nil, is the ring's stored form to start
// with (an environment variable already holding it), so that nothing is
// read before the first re-read; otherwise src is read now. A failed
// re-read keeps the ring in force.
func NewReloadingKeyRing(ctx context.Context, initial []byte, src RingSource, refresh time.Duration) (*KeyRing, error) {
	if src == nil {
		return nil, errors.New("token: reloading key ring: no source")
	}
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if initial == nil {
		var err error
		if initial, err = src(ctx); err != nil {
			return nil, err
		}
	}
	first, err := ParseKeyRing(initial)
	if err != nil {
		return nil, err
	}
	l := &liveRing{src: src, refresh: refresh, now: time.Now}
	l.cur.Store(first)
	l.nextRefresh.Store(l.now().Add(refresh).UnixNano())
	return &KeyRing{live: l}, nil
}

// current returns the ring in force, starting a background refresh when
// one is due.
func (r *KeyRing) current() *KeyRing {
	if r.live == nil {
		return r
	}
	r.live.maybeRefresh()
	return r.live.cur.Load()
}

func (l *liveRing) maybeRefresh() {
	due := l.now().UnixNano() >= l.nextRefresh.Load()
	if !due || !l.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.refreshing.Store(false)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.reload() != nil {
			l.nextRefresh.Store(l.now().Add(min(l.refresh, refreshRetry)).UnixNano())
		}
	}()
}

// reload re-reads the source; l.mu is held. On success the next periodic
// refresh is a full period away.
func (l *liveRing) reload() error {
	ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
	defer cancel()
	data, err := l.src(ctx)
	if err == nil {
		var next *KeyRing
		if next, err = ParseKeyRing(data); err == nil {
			l.cur.Store(next)
			l.reloads++
			l.nextRefresh.Store(l.now().Add(l.refresh).UnixNano())
		}
	}
	l.lastErr = err
	return err
}

// reloadOnMiss re-reads the source after a token named a kid that seen,
// the ring the caller verified with, does not hold, and returns the ring
// in force. It re-reads at most once per MissReloadGap; a caller that
// waited for another's re-read gets that ring.
func (l *liveRing) reloadOnMiss(seen *KeyRing) *KeyRing {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.cur.Load(); cur != seen {
		return cur
	}
	now := l.now()
	if !l.lastMiss.IsZero() && now.Sub(l.lastMiss) < MissReloadGap {
		return seen
	}
	l.lastMiss = now
	_ = l.reload()
	return l.cur.Load()
}

// ReloadError returns the error of the ring's last re-read, nil when it
// succeeded or for a ring that does not reload.
func (r *KeyRing) ReloadError() error {
	if r.live == nil {
		return nil
	}
	r.live.mu.Lock()
	defer r.live.mu.Unlock()
	return r.live.lastErr
}

// EnvKeysSecret is the variable of KeyConfig.Secret, named in errors.
const EnvKeysSecret = "SERVO_TOKEN_KEYS_SECRET"

// OpenKeyRing loads the key ring c names and, when it has a source to
// re-read, makes it reloading (NewReloadingKeyRing, DefaultRefresh):
//
//   - c.Secret set: the secret's latest version, read by the RingSource secret
//     returns for its name. The ring starts from c.JSON when that is set
//     too (no read before the first re-read), otherwise from one read now.
//   - c.File set: the file, re-read.
//   - otherwise LoadKeyRing: c.JSON, never re-read.
func OpenKeyRing(ctx context.Context, c KeyConfig, secret func(name string) RingSource) (*KeyRing, error) {
	if c.Secret != "" {
		if secret == nil {
			return nil, fmt.Errorf("token: %s is set but no Secret Manager source was given", EnvKeysSecret)
		}
		if c.File != "" {
			return nil, fmt.Errorf("token: both %s and %s are set; set one", EnvKeysSecret, EnvKeysFile)
		}
		var initial []byte // nil: read the secret now
		if len(c.JSON) > 0 {
			initial = c.JSON
		}
		r, err := NewReloadingKeyRing(ctx, initial, secret(c.Secret), 0)
		if err != nil {
			return nil, fmt.Errorf("token: %s: %w", EnvKeysSecret, err)
		}
		return r, nil
	}
	if c.File != "" {
		if len(c.JSON) > 0 {
			return nil, fmt.Errorf("token: both %s and %s are set; set one", EnvKeys, EnvKeysFile)
		}
		r, err := NewReloadingKeyRing(ctx, nil, RingFileSource(c.File), 0)
		if err != nil {
			return nil, fmt.Errorf("token: %s %s: %w", EnvKeysFile, c.File, err)
		}
		return r, nil
	}
	return LoadKeyRing(c)
}
