package pull

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/api/idtoken"

	"github.com/servo-dev/servo/internal/auth"
)

// Identity returns the verified identity (an e-mail address) of a claim's
// caller, or "" when the request names none. An error means the caller
// named an identity that could not be verified (401).
type Identity func(r *http.Request) (string, error)

// ErrUnverified: the caller's credentials were refused.
var ErrUnverified = errors.New("pull: caller identity not verified")

// IDToken is the production Identity: the caller's Google-signed ID token
// (Authorization: Bearer, as idtoken.NewClient sends it) for audience (the
// claim function's URL), verified by auth.GoogleVerifier; the identity is
// its verified `email` claim. v may be nil (idtoken.Validate's shared
// validator).
func IDToken(audience string, v *idtoken.Validator) Identity {
	g := auth.GoogleVerifier{Audiences: []string{audience}, Validator: v}
	return func(r *http.Request) (string, error) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || raw == "" {
			return "", nil
		}
		email, err := g.Verify(r.Context(), raw)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrUnverified, err)
		}
		return email, nil
	}
}

// DevIdentityHeader names the caller in the local stack only: `servo dev`
// takes its value as the caller's identity, unverified. Production never
// accepts it (the ServoClaim function verifies ID tokens).
const DevIdentityHeader = "X-Servo-Dev-Identity"

// DevIdentity is the local stack's Identity: the DevIdentityHeader value.
func DevIdentity() Identity {
	return func(r *http.Request) (string, error) { return r.Header.Get(DevIdentityHeader), nil }
}
