package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/api/idtoken"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/task"
)

// Error codes of authentication, authorisation and quotas.
const (
	// CodeUnauthenticated: no identity token where the policy needs one,
	// or a token that is malformed, forged, expired or for another API.
	CodeUnauthenticated = "unauthenticated"
	// CodePermissionDenied: the caller has no role for the tenant.
	CodePermissionDenied = "permission_denied"
	// CodeQuotaExceeded: the tenant or worker is at maxQueued.
	CodeQuotaExceeded = "quota_exceeded"
)

// QuotaRetryAfter is the Retry-After, in seconds, of a 429 answer.
const QuotaRetryAfter = 10

// MaxListTenants is the most tenants a list filters on in one query
// (Firestore's limit on an "in" filter); a caller with roles on more
// tenants names one.
const MaxListTenants = 30

// Verifier checks an identity token and returns the caller's e-mail. It
// returns an error matching auth.ErrIdentityTokenExpired or auth.ErrInvalidIdentityToken.
type Verifier interface {
	Verify(ctx context.Context, raw string) (email string, err error)
}

// GoogleVerifier verifies Google-signed ID tokens (the ones Cloud
// Functions' IAM already checked, verified again for defence in depth)
// with google.golang.org/api/idtoken, and requires a verified e-mail.
type GoogleVerifier struct {
	// Audience, when set, must be the token's aud (the API's URL).
	Audience string
}

// Verify implements Verifier.
func (g GoogleVerifier) Verify(ctx context.Context, raw string) (string, error) {
	p, err := idtoken.Validate(ctx, raw, g.Audience)
	switch {
	case err != nil && strings.Contains(err.Error(), "expired"):
		return "", auth.ErrIdentityTokenExpired
	case err != nil:
		return "", fmt.Errorf("%w: %w", auth.ErrInvalidIdentityToken, err)
	}
	email, _ := p.Claims["email"].(string)
	verified, _ := p.Claims["email_verified"].(bool)
	if email == "" || !verified {
		return "", fmt.Errorf("%w: no verified email claim", auth.ErrInvalidIdentityToken)
	}
	return email, nil
}

// DevVerifier accepts the dev identity tokens of `servo --as` signed with
// the key of one servo dev run (auth.SignDev). Only the local stack
// configures it.
type DevVerifier struct {
	Key []byte
	// Now defaults to time.Now.
	Now func() time.Time
}

// Verify implements Verifier.
func (d DevVerifier) Verify(_ context.Context, raw string) (string, error) {
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	return auth.VerifyDev(d.Key, raw, now())
}

type principalKey struct{}

// Principal is the caller's verified e-mail ("" when the open policy let a
// caller without an identity token in).
func Principal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// authenticate finds the caller: a Bearer token is verified by the
// configured verifiers (the first that accepts it wins); a request
// without one passes only under the open policy. A token is checked
// whenever a verifier is configured, even under the open policy.
func (h *handler) authenticate(r *http.Request) (string, *apiError) {
	authz := r.Header.Get("Authorization")
	if authz == "" {
		if h.cfg.Access.IsOpen() {
			return "", nil
		}
		return "", unauthenticated("an identity token is required (Authorization: Bearer <ID token>)")
	}
	if len(h.cfg.Verifiers) == 0 {
		if h.cfg.Access.IsOpen() {
			return "", nil
		}
		return "", unauthenticated("this API has no identity verifier configured")
	}
	raw, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return "", unauthenticated("the Authorization header must be Bearer <ID token>")
	}
	expired := false
	for _, v := range h.cfg.Verifiers {
		email, err := v.Verify(r.Context(), strings.TrimSpace(raw))
		if err == nil {
			return email, nil
		}
		expired = expired || errors.Is(err, auth.ErrIdentityTokenExpired)
	}
	if expired {
		return "", unauthenticated("the identity token has expired")
	}
	return "", unauthenticated("the identity token is not valid for this API")
}

func unauthenticated(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, body: ErrorResponse{Error: CodeUnauthenticated, Message: msg}}
}

// allowed checks that the caller may do a on tenant's tasks: nil, or 403
// permission_denied. The message does not name the tenant: a caller asking
// for another tenant's task by id learns nothing of it.
func (h *handler) allowed(r *http.Request, tenant string, a auth.Action) *apiError {
	who := Principal(r.Context())
	if h.cfg.Access.Allows(who, tenant, a) {
		return nil
	}
	if who == "" {
		who = "the anonymous caller"
	}
	return &apiError{status: http.StatusForbidden, body: ErrorResponse{Error: CodePermissionDenied,
		Message: fmt.Sprintf("%s may not %s this tenant's tasks (needs the %s role)", who, a, a.Needs())}}
}

// tenantScope is the tenant filter of a list: nil when requested names a
// tenant the caller may act on (the list filters on it) or when the caller
// may act on every tenant; else the tenants the caller may act on, for an
// "in" filter in the query. 403 when there are none.
func (h *handler) tenantScope(r *http.Request, requested string, a auth.Action) ([]string, *apiError) {
	if requested != "" {
		return nil, h.allowed(r, requested, a)
	}
	all, tenants := h.cfg.Access.Tenants(Principal(r.Context()), a)
	switch {
	case all:
		return nil, nil
	case len(tenants) == 0:
		return nil, h.allowed(r, "", a)
	case len(tenants) > MaxListTenants:
		return nil, invalid("tenantId", "is required: the caller has roles on %d tenants, more than one query filters on (%d)", len(tenants), MaxListTenants)
	}
	return tenants, nil
}

// allowedSubmit checks that the caller may submit t: the submitter role on
// its tenant, operator for a rerun.
func (h *handler) allowedSubmit(r *http.Request, t *task.Task, prefix string) *apiError {
	a := auth.Submit
	if t.RerunOf != "" {
		a = auth.Operate
	}
	e := h.allowed(r, t.TenantID, a)
	if e != nil {
		e.body.Field = prefix + "tenantId"
	}
	return e
}
