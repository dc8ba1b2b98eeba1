// Package googleauth connects the worker SDK to Google's identity: it
// verifies the OIDC token Cloud Tasks puts on a push delivery, and makes the
// ID-token HTTP client a pull worker claims with. It is apart from package
// worker because google.golang.org/api/idtoken brings the Google API
// client's transport (gRPC among it) into the binary; a worker on Cloud Run
// behind the IAM invoker check, or claiming from `servo dev`, needs neither.
package googleauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/api/idtoken"

	"github.com/servo-dev/servo/worker"
)

// Issuers of Google-signed OIDC tokens.
var googleIssuers = []string{"https://accounts.google.com", "accounts.google.com"}

// VerifyOIDC is a worker option that verifies the Cloud Tasks OIDC token
// of every delivery (Authorization: Bearer) with
// google.golang.org/api/idtoken: a Google signature, issuer
// accounts.google.com, and audience (the audience Servo's worker
// configuration names, by default the worker's URL); with emails, the
// token's verified email must also be one of them (the service account
// Cloud Tasks signs as). A delivery that fails is answered 401.
func VerifyOIDC(audience string, emails ...string) worker.Option {
	return VerifyOIDCWith(nil, audience, emails...)
}

// VerifyOIDCWith is VerifyOIDC with v's validator (nil: idtoken.Validate's
// shared validator, which fetches Google's certificates over HTTPS).
func VerifyOIDCWith(v *idtoken.Validator, audience string, emails ...string) worker.Option {
	return worker.WithDeliveryCheck(func(r *http.Request) error {
		return verify(r, v, audience, emails)
	})
}

func verify(r *http.Request, v *idtoken.Validator, audience string, emails []string) error {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return errors.New("no bearer token")
	}
	tok = strings.TrimSpace(tok)
	var (
		p   *idtoken.Payload
		err error
	)
	if v != nil {
		p, err = v.Validate(r.Context(), tok, audience)
	} else {
		p, err = idtoken.Validate(r.Context(), tok, audience)
	}
	if err != nil {
		return err
	}
	if !slices.Contains(googleIssuers, p.Issuer) {
		return fmt.Errorf("issuer %q is not Google's", p.Issuer)
	}
	if len(emails) > 0 {
		email, _ := p.Claims["email"].(string)
		verified, _ := p.Claims["email_verified"].(bool)
		if !verified || !slices.Contains(emails, email) {
			return fmt.Errorf("token email %q is not an allowed service account", email)
		}
	}
	return nil
}

// Client is an HTTP client that adds an ID token for audience (the claim
// API's URL) from Application Default Credentials to every request: the
// worker.PullConfig.Client of a pull worker that claims from a deployed
// Servo.
func Client(ctx context.Context, audience string) (*http.Client, error) {
	c, err := idtoken.NewClient(context.WithoutCancel(ctx), audience)
	if err != nil {
		return nil, fmt.Errorf("googleauth: ID token client for %s: %w", audience, err)
	}
	return c, nil
}
