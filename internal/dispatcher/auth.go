package dispatcher

import (
	"net/http"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/task"
)

// quotaRetryAfter is the Retry-After, in seconds, of a 429 answer.
const quotaRetryAfter = 10

// maxListTenants is the most tenants a list filters on in one query
// (Firestore's limit on an "in" filter); a caller with roles on more
// tenants names one.
const maxListTenants = 30

// authenticate finds the caller (auth.Policy.Authenticate) from IAP's
// signed header, read only when IAP is configured, or the Authorization
// header (auth.Verifiers.Credential): 401 unauthenticated when it is
// refused.
func (h *handler) authenticate(r *http.Request) (string, *apiError) {
	cred, vs, _ := h.cfg.Identity.Credential(r.Header)
	who, err := h.cfg.Access.Authenticate(r.Context(), cred, vs)
	if err != nil {
		return "", unauthenticated(err.Error())
	}
	return who, nil
}

func unauthenticated(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, body: api.Error{Code: api.CodeUnauthenticated, Message: msg}}
}

// allowed checks that the caller may do a on tenant's tasks: nil, or 403
// permission_denied (auth.Policy.Check; the message does not name the
// tenant).
func (h *handler) allowed(r *http.Request, tenant string, a auth.Action) *apiError {
	if err := h.cfg.Access.Check(auth.Principal(r.Context()), tenant, a); err != nil {
		return &apiError{status: http.StatusForbidden, body: api.Error{Code: api.CodePermissionDenied, Message: err.Error()}}
	}
	return nil
}

// tenantScope is the tenant filter of a list: nil when requested names a
// tenant the caller may act on (the list filters on it) or when the caller
// may act on every tenant; else the tenants the caller may act on, for an
// "in" filter in the query. 403 when there are none.
func (h *handler) tenantScope(r *http.Request, requested string, a auth.Action) ([]string, *apiError) {
	if requested != "" {
		return nil, h.allowed(r, requested, a)
	}
	all, tenants := h.cfg.Access.Tenants(auth.Principal(r.Context()), a)
	switch {
	case all:
		return nil, nil
	case len(tenants) == 0:
		return nil, h.allowed(r, "", a)
	case len(tenants) > maxListTenants:
		return nil, invalid("tenantId", "is required: the caller has roles on %d tenants, more than one query filters on (%d)", len(tenants), maxListTenants)
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
