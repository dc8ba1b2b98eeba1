package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/servo-dev/servo/internal/auth"
)

// IdentityCookie carries the identity token a browser signed in with
// (POST /ui/signin) when neither IAP's signed header nor an Authorization
// header names the caller.
const IdentityCookie = "servo_identity"

// errForbidden: the caller's roles do not allow the page.
var errForbidden = errors.New("dashboard: forbidden")

// caller is who asks and what its roles let it view: the scope of every
// read of a page, a live stream or an action.
type caller struct {
	// who is the verified e-mail ("" under the open policy without an
	// identity).
	who string
	// credential is the Authorization value the caller was identified by,
	// passed on to the control API for actions; iap: it came from IAP's
	// signed header, and goes on in that header.
	credential string
	iap        bool
	// all: the caller views every tenant; else tenants lists those it
	// views (sorted).
	all     bool
	tenants []string
	policy  *auth.Policy
}

// key identifies the caller's scope in a live view's key: tabs share a
// refresh only when they see the same tasks.
func (c *caller) key() string {
	if c.all {
		return "*"
	}
	return c.who
}

// views reports whether the caller views tenant's tasks.
func (c *caller) views(tenant string) bool {
	return c.all || slices.Contains(c.tenants, tenant)
}

// credential is the request's identity, as an Authorization value, and
// the verifiers that may accept it: IAP's signed header (only when IAP is
// configured), the Authorization header, or the sign-in cookie.
func (d *Dashboard) credential(r *http.Request) (string, []auth.IdentityVerifier, bool) {
	if v, vs, iap := d.cfg.Identity.Credential(r.Header); v != "" {
		return v, vs, iap
	}
	if c, err := r.Cookie(IdentityCookie); err == nil && c.Value != "" {
		return "Bearer " + c.Value, d.cfg.Identity.Bearer, false
	}
	return "", d.cfg.Identity.Bearer, false
}

// identify authenticates the request with the policy and verifiers (as
// the control API does) and returns its caller; an anonymous caller under
// a policy that is not open is refused.
func (d *Dashboard) identify(r *http.Request) (*caller, error) {
	cred, vs, iap := d.credential(r)
	who, err := d.cfg.Access.Authenticate(r.Context(), cred, vs)
	if err != nil {
		return nil, err
	}
	c := &caller{who: who, credential: cred, iap: iap, policy: d.cfg.Access}
	c.all, c.tenants = d.cfg.Access.Tenants(who, auth.View)
	return c, nil
}

type callerKey struct{}

func withCaller(ctx context.Context, c *caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf is the request's caller (set by ServeHTTP).
func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	if c == nil {
		return &caller{}
	}
	return c
}

// signInPage answers a caller without a (valid) identity: 401 and the
// sign-in form, never data.
func (d *Dashboard) signInPage(w http.ResponseWriter, r *http.Request, msg string) {
	d.signInPageStatus(w, r, http.StatusUnauthorized, msg)
}

func (d *Dashboard) signInPageStatus(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	if strings.HasPrefix(r.URL.Path, Prefix+"live") {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	d.render(w, status, "signin", layoutData{Title: "Sign in", CSRF: d.csrfToken(w, r), View: struct{ Message string }{msg}})
}

// maxSignInToken bounds the token the sign-in form takes.
const maxSignInToken = 8 << 10

// maxCookieAge bounds the sign-in cookie's life when the token names no
// expiry (its exp decides otherwise).
const maxCookieAge = 12 * time.Hour

// signIn serves POST /ui/signin: it verifies the token and keeps it in an
// HttpOnly cookie for the dashboard's later requests, for as long as the
// token is valid (its exp; at most maxCookieAge).
func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	switch {
	case tok == "":
		d.signInPage(w, r, "Paste an identity token.")
		return
	case len(tok) > maxSignInToken:
		d.signInPageStatus(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("That token is too long: paste an identity token of at most %d KiB.", maxSignInToken>>10))
		return
	}
	who, err := auth.VerifyIdentity(r.Context(), tok, d.cfg.Identity.Bearer)
	if err != nil || who == "" {
		d.signInPage(w, r, "That token is not valid for this dashboard.")
		return
	}
	age := maxCookieAge
	if exp, ok := auth.Expiry(tok); ok {
		age = min(age, time.Until(exp))
	}
	http.SetCookie(w, &http.Cookie{Name: IdentityCookie, Value: tok, Path: Prefix, MaxAge: max(1, int(age/time.Second)), HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// signOut serves POST /ui/signout: the sign-in cookie is dropped and the
// browser sent to the sign-in page. (Behind IAP, IAP's own session stays:
// its sign-out is IAP's.)
func (d *Dashboard) signOut(w http.ResponseWriter, r *http.Request) {
	dropCookie(w, r)
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// dropStaleCookie drops the sign-in cookie of a request it could not
// identify (an expired or revoked token), so the browser stops sending it.
func (d *Dashboard) dropStaleCookie(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		return // the cookie was not what failed
	}
	if c, err := r.Cookie(IdentityCookie); err == nil && c.Value != "" {
		dropCookie(w, r)
	}
}

func dropCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: IdentityCookie, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// bucket is whom the caller's live views are counted against
// (auth.LimitKey).
func (c *caller) bucket(r *http.Request) string { return auth.LimitKey(c.who, r.RemoteAddr) }

// signedInByCookie: the request's identity is the sign-in cookie's.
func signedInByCookie(r *http.Request) bool {
	c, err := r.Cookie(IdentityCookie)
	return err == nil && c.Value != "" && r.Header.Get("Authorization") == "" && r.Header.Get(auth.IAPHeader) == ""
}
