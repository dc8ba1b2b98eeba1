package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TaskTokenIssuer is the iss claim of every task token.
const TaskTokenIssuer = "servo"

// Task token lifetimes and clock-skew tolerance (docs/contract.md §3.2).
const (
	// DefaultTaskTokenTTL is the lifetime of a token when the caller asks
	// for none.
	DefaultTaskTokenTTL = 3600 * time.Second
	// MaxTaskTokenTTL is the longest lifetime a token may have.
	MaxTaskTokenTTL = 7200 * time.Second
	// TaskTokenLeeway is the clock skew tolerated when checking exp, nbf
	// and iat.
	TaskTokenLeeway = 2 * time.Second
)

// maxTokenLen bounds the size of a token Verify will look at. Real tokens
// are a few hundred bytes; anything this long is rejected unparsed.
const maxTokenLen = 4096

// Errors returned by KeyRing.Verify. Every rejection wraps exactly one of
// them.
var (
	// ErrInvalidTaskToken means the token is malformed, not signed by a key
	// of the ring, uses another algorithm, or lacks or has a bad claim.
	// Callbacks answer it with HTTP 401 invalid_token.
	ErrInvalidTaskToken = errors.New("invalid task token")
	// ErrTaskTokenExpired means the token is otherwise valid but past its exp.
	// Callbacks answer it with HTTP 401 token_expired.
	ErrTaskTokenExpired = errors.New("task token expired")
)

// Scope is what a token authorises: one attempt of one task.
type Scope struct {
	TenantID    string `json:"tenantId"`
	WorkspaceID string `json:"workspaceId"`
	RunID       string `json:"runId"`
	TaskID      string `json:"taskId"`
	Attempt     int    `json:"attempt"`
}

// missing returns the JSON name of the first absent scope claim, or "".
func (s Scope) missing() string {
	switch {
	case s.TenantID == "":
		return "tenantId"
	case s.WorkspaceID == "":
		return "workspaceId"
	case s.RunID == "":
		return "runId"
	case s.TaskID == "":
		return "taskId"
	case s.Attempt < 1:
		return "attempt"
	}
	return ""
}

// Claims are a verified token's claims: the Scope plus the registered
// claims iss, iat, nbf, exp and jti.
type Claims struct {
	Scope
	jwt.RegisteredClaims
}

// IssuedAtTime returns the iat claim, or the zero time if it is absent.
func (c *Claims) IssuedAtTime() time.Time { return numericTime(c.IssuedAt) }

// ExpiresAtTime returns the exp claim, or the zero time if it is absent.
func (c *Claims) ExpiresAtTime() time.Time { return numericTime(c.ExpiresAt) }

// NotBeforeTime returns the nbf claim, or the zero time if it is absent.
func (c *Claims) NotBeforeTime() time.Time { return numericTime(c.NotBefore) }

// Lifetime is how long the token is valid: from the later of iat and nbf
// (a token for a delivery scheduled later is valid only from then) to exp.
func (c *Claims) Lifetime() time.Duration {
	return c.ExpiresAtTime().Sub(laterTime(c.IssuedAtTime(), c.NotBeforeTime()))
}

func laterTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func numericTime(d *jwt.NumericDate) time.Time {
	if d == nil {
		return time.Time{}
	}
	return d.Time
}

// wireClaims is Claims as the parser sees it: it adds the checks the jwt
// library has no option for (see jwt.ClaimsValidator).
type wireClaims Claims

// Validate reports the first required claim that is absent or empty, and
// rejects lifetimes (from the later of iat and nbf to exp) longer than
// MaxTaskTokenTTL, which no Servo signer produces.
func (c *wireClaims) Validate() error {
	name := c.Scope.missing()
	switch {
	case name != "":
	case c.Issuer == "":
		name = "iss"
	case c.ExpiresAt == nil:
		name = "exp"
	case c.IssuedAt == nil:
		name = "iat"
	case c.ID == "":
		name = "jti"
	}
	if name != "" {
		return &claimError{name: name}
	}
	if (*Claims)(c).Lifetime() > MaxTaskTokenTTL {
		return errLifetime
	}
	return nil
}

// claimError names a required claim that is absent or empty.
type claimError struct{ name string }

func (e *claimError) Error() string { return "missing claim " + e.name }
func (e *claimError) Unwrap() error { return jwt.ErrTokenRequiredClaimMissing }

var errLifetime = errors.New("lifetime exceeds " + MaxTaskTokenTTL.String())

// Sign issues a token for s signed with the active key, valid from now for
// ttl (DefaultTaskTokenTTL when ttl <= 0). It returns the token and its
// expiry, which is whole seconds as encoded in the exp claim.
func (r *KeyRing) Sign(s Scope, ttl time.Duration, now time.Time) (token string, expiresAt time.Time, err error) {
	return r.SignFrom(s, ttl, now, now)
}

// SignFrom is Sign for a token issued at now but valid only from from (its
// nbf claim) for ttl: a token for a delivery scheduled later lives ttl from
// that delivery, not from its signing. A from before now is now.
func (r *KeyRing) SignFrom(s Scope, ttl time.Duration, now, from time.Time) (token string, expiresAt time.Time, err error) {
	if r.live != nil {
		return r.current().SignFrom(s, ttl, now, from)
	}
	if name := s.missing(); name != "" {
		return "", time.Time{}, fmt.Errorf("token: sign: scope has no %s", name)
	}
	if ttl <= 0 {
		ttl = DefaultTaskTokenTTL
	}
	if ttl > MaxTaskTokenTTL {
		return "", time.Time{}, fmt.Errorf("token: sign: ttl %v exceeds maximum %v", ttl, MaxTaskTokenTTL)
	}
	iat, nbf := jwt.NewNumericDate(now), jwt.NewNumericDate(now)
	if from.After(now) {
		nbf = jwt.NewNumericDate(from)
	}
	exp := jwt.NewNumericDate(nbf.Add(ttl))
	c := Claims{
		Scope: s,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    TaskTokenIssuer,
			IssuedAt:  iat,
			NotBefore: nbf,
			ExpiresAt: exp,
			ID:        rand.Text(),
		},
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	t.Header["kid"] = r.active
	token, err = t.SignedString(r.keys[r.active])
	if err != nil {
		return "", time.Time{}, fmt.Errorf("token: sign: %w", err)
	}
	return token, exp.Time, nil
}

// Verify checks token against the ring at time now and returns its claims.
// Every error wraps ErrTaskTokenExpired (only for a token that is valid but
// for its exp) or ErrInvalidTaskToken; its text never contains the token or
// a key.
func (r *KeyRing) Verify(token string, now time.Time) (*Claims, error) {
	if r.live != nil {
		cur := r.current()
		c, err := cur.Verify(token, now)
		if !isUnknownKid(err) {
			return c, err
		}
		// A kid this instance does not know: another instance may sign
		// with a ring this one has not read yet.
		if next := r.live.reloadOnMiss(cur); next != cur {
			return next.Verify(token, now)
		}
		return c, err
	}
	if len(token) > maxTokenLen {
		return nil, reject(ErrInvalidTaskToken, "malformed: too long", jwt.ErrTokenMalformed)
	}
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(TaskTokenIssuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(TaskTokenLeeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithStrictDecoding(),
	)
	var c wireClaims
	t, err := p.ParseWithClaims(token, &c, r.keyFunc)
	if err == nil {
		return (*Claims)(&c), nil
	}
	if errors.Is(err, jwt.ErrTokenNotValidYet) && c.NotBefore != nil {
		// A delivery ahead of its schedule (a Cloud Task run early): the
		// token is early, not invalid, when it verifies in full at its nbf.
		nbf := c.NotBefore.Time
		if _, err := r.Verify(token, nbf.Add(TaskTokenLeeway)); err == nil {
			return nil, &EarlyError{NotBefore: nbf}
		}
	}
	return nil, classify(t, err)
}

// ErrTaskTokenEarly means the token is genuine but valid only from a
// later time (its nbf): the caller may try again then. Errors of Verify
// that wrap it are *EarlyError, and wrap ErrInvalidTaskToken too (the
// token is not valid now).
var ErrTaskTokenEarly = errors.New("task token not valid yet")

// EarlyError is Verify's error for a token that is valid from NotBefore.
type EarlyError struct{ NotBefore time.Time }

func (e *EarlyError) Error() string   { return "task token not valid yet" }
func (e *EarlyError) Unwrap() []error { return []error{ErrTaskTokenEarly, ErrInvalidTaskToken} }

// keyFunc selects the verification key by the kid header.
func (r *KeyRing) keyFunc(t *jwt.Token) (any, error) {
	kid, ok := t.Header["kid"].(string)
	if !ok || kid == "" {
		return nil, errNoKid
	}
	key, ok := r.keys[kid]
	if !ok {
		return nil, errUnknownKid
	}
	return key, nil
}

// reasonUnknownKid is the reason of a rejection for a kid not in the ring.
const reasonUnknownKid = "unknown key id"

// isUnknownKid reports whether err rejects a token for its kid.
func isUnknownKid(err error) bool {
	var r *rejection
	return errors.As(err, &r) && r.reason == reasonUnknownKid
}

var (
	errNoKid      = errors.New("missing kid")
	errUnknownKid = errors.New("unknown kid")
)

// classify turns a parser error into ErrInvalidTaskToken or
// ErrTaskTokenExpired with a fixed, token-free reason. The parser's own
// texts are not passed on: some quote header fields, which are
// attacker-chosen parts of the token.
func classify(t *jwt.Token, err error) error {
	var ce *claimError
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return reject(ErrInvalidTaskToken, "malformed", jwt.ErrTokenMalformed)
	case errors.Is(err, errNoKid):
		return reject(ErrInvalidTaskToken, "missing key id", jwt.ErrTokenUnverifiable)
	case errors.Is(err, errUnknownKid):
		return reject(ErrInvalidTaskToken, reasonUnknownKid, jwt.ErrTokenUnverifiable)
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return reject(ErrInvalidTaskToken, "algorithm not allowed", jwt.ErrTokenUnverifiable)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if t == nil || t.Method == nil || t.Method.Alg() != jwt.SigningMethodHS256.Alg() {
			return reject(ErrInvalidTaskToken, "algorithm not allowed", jwt.ErrTokenSignatureInvalid)
		}
		return reject(ErrInvalidTaskToken, "signature invalid", jwt.ErrTokenSignatureInvalid)
	case errors.As(err, &ce):
		return reject(ErrInvalidTaskToken, ce.Error(), jwt.ErrTokenRequiredClaimMissing)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return reject(ErrInvalidTaskToken, "missing claim", jwt.ErrTokenRequiredClaimMissing)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return reject(ErrInvalidTaskToken, "wrong issuer", jwt.ErrTokenInvalidIssuer)
	case errors.Is(err, errLifetime):
		return reject(ErrInvalidTaskToken, errLifetime.Error(), jwt.ErrTokenInvalidClaims)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return reject(ErrInvalidTaskToken, "not valid yet", jwt.ErrTokenNotValidYet)
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return reject(ErrInvalidTaskToken, "issued in the future", jwt.ErrTokenUsedBeforeIssued)
	case errors.Is(err, jwt.ErrTokenExpired):
		// Checked last: a token that is expired and also wrong in some other
		// way is invalid, not merely expired.
		return reject(ErrTaskTokenExpired, "", jwt.ErrTokenExpired)
	}
	return reject(ErrInvalidTaskToken, "rejected", jwt.ErrTokenInvalidClaims)
}

// rejection is a Verify error: a kind (ErrInvalidTaskToken or
// ErrTaskTokenExpired), a fixed reason for humans, and the jwt sentinel
// describing the cause.
type rejection struct {
	kind   error
	reason string
	cause  error
}

func reject(kind error, reason string, cause error) error {
	return &rejection{kind: kind, reason: reason, cause: cause}
}

func (e *rejection) Error() string {
	if e.reason == "" {
		return e.kind.Error()
	}
	return e.kind.Error() + ": " + e.reason
}

func (e *rejection) Unwrap() []error { return []error{e.kind, e.cause} }
