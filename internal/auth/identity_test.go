package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/servo-dev/servo/internal/servotest"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

func TestAuthenticate(t *testing.T) {
	key := NewDevKey()
	now := time.Now()
	good, _ := SignDev(key, "a@x.com", now, time.Minute)
	expired, _ := SignDev(key, "a@x.com", now.Add(-time.Hour), time.Minute)
	forged, _ := SignDev(NewDevKey(), "a@x.com", now, time.Minute)
	closed, err := ParsePolicy([]byte(`{"principals": {"a@x.com": {"t": "viewer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	dev := []IdentityVerifier{DevVerifier{Key: key}}
	for _, c := range []struct {
		name   string
		policy *Policy
		vs     []IdentityVerifier
		authz  string
		who    string
		reason string // "" when accepted
	}{
		{"open, no header", OpenPolicy(), dev, "", "", ""},
		{"nil policy, no header", nil, dev, "", "", ""},
		{"open, no verifier, any header", OpenPolicy(), nil, "Bearer junk", "", ""},
		{"open, a token is still checked", OpenPolicy(), dev, "Bearer " + forged, "", "the identity token is not valid for this API"},
		{"open, good token", OpenPolicy(), dev, "Bearer " + good, "a@x.com", ""},
		{"closed, no header", closed, dev, "", "", "an identity token is required (Authorization: Bearer <ID token>)"},
		{"closed, no verifier", closed, nil, "Bearer " + good, "", "this API has no identity verifier configured"},
		{"closed, not bearer", closed, dev, "Basic abc", "", "the Authorization header must be Bearer <ID token>"},
		{"closed, empty bearer", closed, dev, "Bearer  ", "", "the Authorization header must be Bearer <ID token>"},
		{"closed, good token", closed, dev, "Bearer " + good + " ", "a@x.com", ""},
		{"closed, expired", closed, dev, "Bearer " + expired, "", "the identity token has expired"},
		{"closed, forged", closed, dev, "Bearer " + forged, "", "the identity token is not valid for this API"},
		{"closed, garbage", closed, dev, "Bearer x.y.z", "", "the identity token is not valid for this API"},
	} {
		t.Run(c.name, func(t *testing.T) {
			who, err := c.policy.Authenticate(context.Background(), c.authz, c.vs)
			if c.reason == "" {
				if err != nil || who != c.who {
					t.Fatalf("%q %v, want %q", who, err, c.who)
				}
				return
			}
			var ue *UnauthenticatedError
			if !errors.As(err, &ue) || err.Error() != c.reason || who != "" {
				t.Fatalf("%q %v, want the refusal %q", who, err, c.reason)
			}
		})
	}
}

// failing is a verifier that refuses every token with err.
type failing struct{ err error }

func (f failing) Verify(context.Context, string) (string, error) { return "", f.err }

func TestVerifyIdentity(t *testing.T) {
	key := NewDevKey()
	tok, _ := SignDev(key, "a@x.com", time.Now(), time.Minute)
	ctx := context.Background()
	expired := failing{ErrIdentityTokenExpired}
	invalid := failing{ErrInvalidIdentityToken}
	if email, err := VerifyIdentity(ctx, tok, []IdentityVerifier{invalid, DevVerifier{Key: key}}); err != nil || email != "a@x.com" {
		t.Errorf("the second verifier accepts: %q %v", email, err)
	}
	if _, err := VerifyIdentity(ctx, tok, []IdentityVerifier{invalid, expired}); !errors.Is(err, ErrIdentityTokenExpired) {
		t.Errorf("one verifier finds it expired: %v", err)
	}
	if _, err := VerifyIdentity(ctx, tok, []IdentityVerifier{invalid, invalid}); !errors.Is(err, ErrInvalidIdentityToken) || errors.Is(err, ErrIdentityTokenExpired) {
		t.Errorf("both refuse: %v", err)
	}
	if _, err := VerifyIdentity(ctx, tok, nil); !errors.Is(err, ErrInvalidIdentityToken) {
		t.Errorf("no verifier: %v", err)
	}
}

func TestPrincipal(t *testing.T) {
	ctx := context.Background()
	if got := Principal(ctx); got != "" {
		t.Errorf("Principal of a bare context = %q", got)
	}
	if got := Principal(WithPrincipal(ctx, "a@x.com")); got != "a@x.com" {
		t.Errorf("Principal = %q", got)
	}
}

func TestGoogleVerifier(t *testing.T) {
	google := servotest.NewGoogleIDTokens(t)
	v, err := idtoken.NewValidator(context.Background(), option.WithHTTPClient(google.Client()))
	if err != nil {
		t.Fatal(err)
	}
	const aud = "https://servo-api.example.com"
	const sa = "ci@proj.iam.gserviceaccount.com"
	sign := func(forge bool, mutate func(jwt.MapClaims)) string { return google.Sign(t, aud, sa, forge, mutate) }
	g := GoogleVerifier{Audiences: []string{"https://servo-api-1.run.app", aud}, Validator: v}
	for _, c := range []struct {
		name string
		raw  string
		want error
	}{
		{"valid", sign(false, nil), nil},
		{"expired", sign(false, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), ErrIdentityTokenExpired},
		{"forged", sign(true, nil), ErrInvalidIdentityToken},
		{"wrong audience", sign(false, func(c jwt.MapClaims) { c["aud"] = "https://elsewhere" }), ErrInvalidIdentityToken},
		{"no audience", sign(false, func(c jwt.MapClaims) { delete(c, "aud") }), ErrInvalidIdentityToken},
		{"another issuer", sign(false, func(c jwt.MapClaims) { c["iss"] = "https://evil.example.com" }), ErrInvalidIdentityToken},
		{"IAP's issuer", sign(false, func(c jwt.MapClaims) { c["iss"] = IAPIssuer }), ErrInvalidIdentityToken},
		{"no email", sign(false, func(c jwt.MapClaims) { delete(c, "email") }), ErrInvalidIdentityToken},
		{"email unverified", sign(false, func(c jwt.MapClaims) { c["email_verified"] = false }), ErrInvalidIdentityToken},
		{"garbage", "not.a.jwt", ErrInvalidIdentityToken},
	} {
		t.Run(c.name, func(t *testing.T) {
			email, err := g.Verify(context.Background(), c.raw)
			if c.want == nil {
				if err != nil || email != sa {
					t.Fatalf("%q %v, want %q", email, err, sa)
				}
				return
			}
			if !errors.Is(err, c.want) || email != "" {
				t.Fatalf("%q %v, want %v", email, err, c.want)
			}
			if other := map[error]error{ErrIdentityTokenExpired: ErrInvalidIdentityToken, ErrInvalidIdentityToken: ErrIdentityTokenExpired}[c.want]; errors.Is(err, other) {
				t.Fatalf("%v matches both ErrIdentityTokenExpired and ErrInvalidIdentityToken", err)
			}
		})
	}
	if google.Fetches.Load() == 0 {
		t.Fatal("the validator never fetched the certificates: no signature was checked")
	}
	// The issuer without its scheme is Google's too.
	if email, err := g.Verify(context.Background(), sign(false, func(c jwt.MapClaims) { c["iss"] = "accounts.google.com" })); err != nil || email != sa {
		t.Errorf("iss accounts.google.com: %q %v", email, err)
	}
	// The second audience is accepted as well as the first.
	if email, err := g.Verify(context.Background(), google.Sign(t, "https://servo-api-1.run.app", sa, false, nil)); err != nil || email != sa {
		t.Errorf("the other audience: %q %v", email, err)
	}
	// No audience configured: nothing is accepted, not even a valid token
	// (a Google ID token minted for any other service has the same
	// signature).
	for _, auds := range [][]string{nil, {""}} {
		if _, err := (GoogleVerifier{Audiences: auds, Validator: v}).Verify(context.Background(), sign(false, nil)); !errors.Is(err, ErrInvalidIdentityToken) {
			t.Errorf("audiences %q: %v", auds, err)
		}
	}
	// RS256 only: an ES256 token is refused before any key is fetched.
	es := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "https://accounts.google.com", "aud": aud})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	raw, _ := es.SignedString(key)
	if _, err := g.Verify(context.Background(), raw); !errors.Is(err, ErrInvalidIdentityToken) || !strings.Contains(err.Error(), "RS256") {
		t.Errorf("ES256 token: %v", err)
	}
}
