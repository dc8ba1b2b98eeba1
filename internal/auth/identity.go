package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/api/idtoken"
)

// IdentityVerifier checks an identity token and returns the caller's
// e-mail. Its errors wrap ErrIdentityTokenExpired or
// ErrInvalidIdentityToken.
type IdentityVerifier interface {
	Verify(ctx context.Context, raw string) (email string, err error)
}

// GoogleIssuers are the iss values of Google-signed ID tokens
// (https://developers.google.com/identity/openid-connect/openid-connect#validatinganidtoken).
var GoogleIssuers = []string{"https://accounts.google.com", "accounts.google.com"}

// GoogleVerifier verifies Google-signed ID tokens with
// google.golang.org/api/idtoken: RS256 (Google's ID-token keys, never
// IAP's), issued by Google (GoogleIssuers), for one of Audiences, with a
// verified e-mail. It verifies the control API's callers (tokens Cloud
// Run's IAM already checked, verified again for defence in depth) and pull
// pools' workers. Without an audience it accepts nothing: a Google ID
// token minted for any other service (a "Sign in with Google" app's)
// carries the same signature.
type GoogleVerifier struct {
	// Audiences are the accepted aud values (the API's or the claim
	// function's URLs); at least one is required.
	Audiences []string
	// Validator checks the token; nil means idtoken.Validate's shared one.
	Validator *idtoken.Validator
}

// Verify implements IdentityVerifier.
func (g GoogleVerifier) Verify(ctx context.Context, raw string) (string, error) {
	if !slices.ContainsFunc(g.Audiences, func(a string) bool { return a != "" }) {
		return "", fmt.Errorf("%w: no audience configured for Google ID tokens", ErrInvalidIdentityToken)
	}
	if err := requireAlg(raw, "RS256"); err != nil {
		return "", err
	}
	validate := idtoken.Validate
	if g.Validator != nil {
		validate = g.Validator.Validate
	}
	// The audience is checked below, against each accepted one.
	p, err := validate(ctx, raw, "")
	switch {
	case err != nil && strings.Contains(err.Error(), "expired"):
		return "", fmt.Errorf("%w: %w", ErrIdentityTokenExpired, err)
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrInvalidIdentityToken, err)
	}
	if !slices.Contains(GoogleIssuers, p.Issuer) {
		return "", fmt.Errorf("%w: issuer %q is not Google's", ErrInvalidIdentityToken, p.Issuer)
	}
	if p.Audience == "" || !slices.Contains(g.Audiences, p.Audience) {
		return "", fmt.Errorf("%w: audience %q is not this service's", ErrInvalidIdentityToken, p.Audience)
	}
	email, _ := p.Claims["email"].(string)
	verified, _ := p.Claims["email_verified"].(bool)
	if email == "" || !verified {
		return "", fmt.Errorf("%w: no verified email claim", ErrInvalidIdentityToken)
	}
	return email, nil
}

// requireAlg refuses a JWT whose header's alg is not want, before any key
// is fetched.
func requireAlg(raw, want string) error {
	tok, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidIdentityToken, err)
	}
	if alg := tok.Method.Alg(); alg != want {
		return fmt.Errorf("%w: signed with %q, want %s", ErrInvalidIdentityToken, alg, want)
	}
	return nil
}

// DevVerifier accepts the dev identity tokens of `servo --as` signed with
// the key of one servo dev run (SignDev). Only the local stack configures
// it.
type DevVerifier struct {
	Key []byte
	// Now defaults to time.Now.
	Now func() time.Time
}

// Verify implements IdentityVerifier.
func (d DevVerifier) Verify(_ context.Context, raw string) (string, error) {
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	return VerifyDev(d.Key, raw, now())
}

// VerifyIdentity returns the e-mail of the first of vs that accepts raw.
// When none does, the error joins theirs: it matches
// ErrIdentityTokenExpired when any found the token expired.
func VerifyIdentity(ctx context.Context, raw string, vs []IdentityVerifier) (string, error) {
	if len(vs) == 0 {
		return "", fmt.Errorf("%w: no identity verifier", ErrInvalidIdentityToken)
	}
	errs := make([]error, 0, len(vs))
	for _, v := range vs {
		email, err := v.Verify(ctx, raw)
		if err == nil {
			return email, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// UnauthenticatedError is a request Policy.Authenticate refused. Its text
// is Reason, meant for the caller; Err is the verifiers' refusal, if any.
type UnauthenticatedError struct {
	Reason string
	Err    error
}

func (e *UnauthenticatedError) Error() string { return e.Reason }

func (e *UnauthenticatedError) Unwrap() error { return e.Err }

// Authenticate finds the caller of a control API request from its
// Authorization header value: a Bearer token is verified by vs (the first
// that accepts it wins); a request without one is the anonymous caller
// "", let in only by the open policy. A token is checked whenever a
// verifier is given, even under the open policy. Every refusal is an
// *UnauthenticatedError.
func (p *Policy) Authenticate(ctx context.Context, authorization string, vs []IdentityVerifier) (string, error) {
	if authorization == "" {
		if p.IsOpen() {
			return "", nil
		}
		return "", &UnauthenticatedError{Reason: "an identity token is required (Authorization: Bearer <ID token>)"}
	}
	if len(vs) == 0 {
		if p.IsOpen() {
			return "", nil
		}
		return "", &UnauthenticatedError{Reason: "this API has no identity verifier configured"}
	}
	raw, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return "", &UnauthenticatedError{Reason: "the Authorization header must be Bearer <ID token>"}
	}
	email, err := VerifyIdentity(ctx, strings.TrimSpace(raw), vs)
	switch {
	case err == nil:
		return email, nil
	case errors.Is(err, ErrIdentityTokenExpired):
		return "", &UnauthenticatedError{Reason: "the identity token has expired", Err: err}
	}
	return "", &UnauthenticatedError{Reason: "the identity token is not valid for this API", Err: err}
}

type principalKey struct{}

// WithPrincipal returns ctx carrying principal, the caller's verified
// e-mail ("" for a caller without an identity token).
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// Principal is the caller's verified e-mail carried by ctx: "" when the
// open policy let a caller without an identity token in, or when ctx
// carries none.
func Principal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// IAPHeader is the header Identity-Aware Proxy adds to each request it
// lets through: an ES256 JWT it signs, naming the signed-in user
// (https://cloud.google.com/iap/docs/signed-headers-howto).
const IAPHeader = "X-Goog-Iap-Jwt-Assertion"

// IAPIssuer is the iss of IAP's signed header.
const IAPIssuer = "https://cloud.google.com/iap"

// IAPVerifier verifies IAP's signed header: signed with IAP's keys
// (ES256 only), issued by IAPIssuer for Audience (/projects/NUMBER/global/
// backendServices/ID, or /projects/NUMBER/apps/PROJECT for App Engine),
// not expired and not issued in the future, with an e-mail claim.
type IAPVerifier struct {
	// Audience is the backend's audience (required).
	Audience string
	// Validator checks the token; nil means idtoken.Validate's shared one.
	Validator *idtoken.Validator
	// Now defaults to time.Now.
	Now func() time.Time
}

// Verify implements IdentityVerifier.
func (v IAPVerifier) Verify(ctx context.Context, raw string) (string, error) {
	if v.Audience == "" {
		return "", fmt.Errorf("%w: no IAP audience configured", ErrInvalidIdentityToken)
	}
	if err := requireAlg(raw, "ES256"); err != nil {
		return "", err
	}
	validate := idtoken.Validate
	if v.Validator != nil {
		validate = v.Validator.Validate
	}
	p, err := validate(ctx, raw, v.Audience)
	switch {
	case err != nil && strings.Contains(err.Error(), "expired"):
		return "", fmt.Errorf("%w: %w", ErrIdentityTokenExpired, err)
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrInvalidIdentityToken, err)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	const skew = 30 * time.Second
	if p.Issuer != IAPIssuer {
		return "", fmt.Errorf("%w: issuer %q is not IAP", ErrInvalidIdentityToken, p.Issuer)
	}
	if time.Unix(p.IssuedAt, 0).After(now().Add(skew)) {
		return "", fmt.Errorf("%w: issued in the future", ErrInvalidIdentityToken)
	}
	email, _ := p.Claims["email"].(string)
	if email == "" {
		return "", fmt.Errorf("%w: no email claim", ErrInvalidIdentityToken)
	}
	// IAP prefixes the e-mail of some identities ("accounts.google.com:").
	if _, after, ok := strings.Cut(email, ":"); ok {
		email = after
	}
	return email, nil
}

// Verifiers say where a request's identity comes from and who checks
// it. IAP's signed header is read only when IAP is configured, and only
// IAP's verifier checks it; the Authorization header's token is checked
// by Bearer alone.
type Verifiers struct {
	// Bearer check the token of the Authorization header (and of the
	// dashboard's sign-in cookie).
	Bearer []IdentityVerifier
	// IAP, when set, checks IAP's signed header (IAPHeader), which is
	// then the request's identity whenever it is present. Nil: the API is
	// not behind IAP and the header is ignored, whoever sent it.
	IAP *IAPVerifier
}

// Credential is the identity a request presents, as an Authorization
// value for Policy.Authenticate, and the verifiers that may accept it:
// IAP's signed header and IAP's verifier when IAP is configured and the
// header is there (IAP strips any a client sends; iap is then true), else
// the Authorization header and the Bearer verifiers.
func (v Verifiers) Credential(h interface{ Get(string) string }) (authorization string, vs []IdentityVerifier, iap bool) {
	if v.IAP != nil {
		if a := strings.TrimSpace(h.Get(IAPHeader)); a != "" {
			return "Bearer " + a, []IdentityVerifier{*v.IAP}, true
		}
	}
	return h.Get("Authorization"), v.Bearer, false
}

// Kinds names the identities v accepts, for GET /v1/health: "iap",
// "google" (Google ID tokens), "dev" (servo dev's), "other".
func (v Verifiers) Kinds() []string {
	var kinds []string
	if v.IAP != nil {
		kinds = append(kinds, "iap")
	}
	for _, b := range v.Bearer {
		k := "other"
		switch b.(type) {
		case GoogleVerifier, *GoogleVerifier:
			k = "google"
		case DevVerifier, *DevVerifier:
			k = "dev"
		case IAPVerifier, *IAPVerifier:
			k = "iap"
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// Expiry reads the exp claim of an identity token the verifiers accepted
// (raw, or an Authorization value "Bearer raw"), unverified: a stream
// opened with the token ends when it expires, as a request with it would
// then be refused. ok is false when the token names no expiry.
func Expiry(raw string) (exp time.Time, ok bool) {
	raw = strings.TrimSpace(strings.TrimPrefix(raw, "Bearer "))
	tok, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
	if err != nil {
		return time.Time{}, false
	}
	e, err := tok.Claims.GetExpirationTime()
	if err != nil || e == nil {
		return time.Time{}, false
	}
	return e.Time, true
}

// LimitKey is whom a per-caller limit (open streams, live views) counts
// against: the verified e-mail, or for an anonymous caller (the open
// policy) its address (remoteAddr, host:port).
func LimitKey(principal, remoteAddr string) string {
	if principal != "" {
		return "who:" + principal
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	return "addr:" + host
}
