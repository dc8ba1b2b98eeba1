package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/api/idtoken"
)

// IdentityVerifier checks an identity token and returns the caller's
// e-mail. Its errors wrap ErrIdentityTokenExpired or
// ErrInvalidIdentityToken.
type IdentityVerifier interface {
	Verify(ctx context.Context, raw string) (email string, err error)
}

// GoogleVerifier verifies Google-signed ID tokens with
// google.golang.org/api/idtoken and requires a verified e-mail: the
// control API's callers (tokens Cloud Functions' IAM already checked,
// verified again for defence in depth) and pull pools' workers.
type GoogleVerifier struct {
	// Audience, when set, must be the token's aud (the API's or the claim
	// function's URL).
	Audience string
	// Validator checks the token; nil means idtoken.Validate's shared one.
	Validator *idtoken.Validator
}

// Verify implements IdentityVerifier.
func (g GoogleVerifier) Verify(ctx context.Context, raw string) (string, error) {
	validate := idtoken.Validate
	if g.Validator != nil {
		validate = g.Validator.Validate
	}
	p, err := validate(ctx, raw, g.Audience)
	switch {
	case err != nil && strings.Contains(err.Error(), "expired"):
		return "", fmt.Errorf("%w: %w", ErrIdentityTokenExpired, err)
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrInvalidIdentityToken, err)
	}
	email, _ := p.Claims["email"].(string)
	verified, _ := p.Claims["email_verified"].(bool)
	if email == "" || !verified {
		return "", fmt.Errorf("%w: no verified email claim", ErrInvalidIdentityToken)
	}
	return email, nil
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
// (ES256), issued by IAPIssuer for Audience (/projects/NUMBER/global/
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

// RequestCredential is the identity a request presents, as an
// Authorization header value for Policy.Authenticate: IAP's signed header
// when it is there (IAP strips any a client sends), else the
// Authorization header.
func RequestCredential(h interface{ Get(string) string }) string {
	if a := strings.TrimSpace(h.Get(IAPHeader)); a != "" {
		return "Bearer " + a
	}
	return h.Get("Authorization")
}
