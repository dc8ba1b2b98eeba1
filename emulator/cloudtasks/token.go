package cloudtasks

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// defaultOAuthScope is the scope of an oauth_token that names none.
const defaultOAuthScope = "https://www.googleapis.com/auth/cloud-platform"

// tokenLifetime matches the one-hour lifetime of Google-issued ID tokens.
const tokenLifetime = time.Hour

var (
	processKeyOnce sync.Once
	processKey     *rsa.PrivateKey
	processKeyErr  error
)

// processSigningKey returns the key shared by every Server of this process
// that was given none: generating a 2048-bit key per test server is slow.
func processSigningKey() *rsa.PrivateKey {
	processKeyOnce.Do(func() {
		processKey, processKeyErr = rsa.GenerateKey(rand.Reader, 2048)
	})
	if processKeyErr != nil {
		panic(fmt.Sprintf("cloudtasks emulator: generate signing key: %v", processKeyErr))
	}
	return processKey
}

// signer mints the bearer tokens attached to task requests. They are RS256
// JWTs signed with a local key; they look like Google's tokens but Google's
// published keys do not verify them. The process-wide key is generated on
// first use, so servers that never mint a token never pay for it.
type signer struct {
	issuer string

	once sync.Once
	key  *rsa.PrivateKey
	kid  string
}

func newSigner(key *rsa.PrivateKey, issuer string) *signer {
	if issuer == "" {
		issuer = "https://accounts.google.com"
	}
	return &signer{key: key, issuer: issuer}
}

// signingKey returns the key and its id, generating the key if needed.
func (s *signer) signingKey() (*rsa.PrivateKey, string) {
	s.once.Do(func() {
		if s.key == nil {
			s.key = processSigningKey()
		}
		sum := sha256.Sum256(s.key.PublicKey.N.Bytes())
		s.kid = hex.EncodeToString(sum[:10])
	})
	return s.key, s.kid
}

// OIDCClaims are the claims of the OIDC ID token attached to a task request
// that has an oidc_token, modelled on a Google-issued service-account ID
// token.
type OIDCClaims struct {
	jwt.RegisteredClaims
	// Email is the oidc_token's service_account_email.
	Email string `json:"email"`
	// EmailVerified is always true.
	EmailVerified bool `json:"email_verified"`
	// AuthorizedParty is the service account's stable numeric id.
	AuthorizedParty string `json:"azp,omitempty"`
}

// MarshalJSON writes a single audience as a string, as Google's ID tokens
// do (google.golang.org/api/idtoken reads "aud" as a string), rather than
// golang-jwt's default one-element array.
func (c OIDCClaims) MarshalJSON() ([]byte, error) {
	type plain OIDCClaims
	b, err := json.Marshal(plain(c))
	if err != nil || len(c.Audience) != 1 {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["aud"] = c.Audience[0]
	return json.Marshal(m)
}

// oAuthClaims are the claims of the access token attached to a task request
// that has an oauth_token. Real Google access tokens are opaque; the
// emulator's are JWTs so that a local worker can inspect them.
type oAuthClaims struct {
	jwt.RegisteredClaims
	// Email is the oauth_token's service_account_email.
	Email string `json:"email"`
	// Scope is the oauth_token's scope, defaultOAuthScope if it named none.
	Scope string `json:"scope"`
}

// subjectFor derives a stable, numeric-looking subject from a service
// account email, the way Google uses the account's unique id.
func subjectFor(email string) string {
	sum := sha256.Sum256([]byte(email))
	return fmt.Sprint(binary.BigEndian.Uint64(sum[:8]) >> 1)
}

func (s *signer) sign(claims jwt.Claims) (string, error) {
	key, kid := s.signingKey()
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	t.Header["kid"] = kid
	out, err := t.SignedString(key)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return out, nil
}

func (s *signer) registered(sub, aud string, now time.Time) jwt.RegisteredClaims {
	return jwt.RegisteredClaims{
		Issuer:    s.issuer,
		Subject:   sub,
		Audience:  jwt.ClaimStrings{aud},
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(tokenLifetime)),
	}
}

// oidcToken mints the ID token for email with audience aud.
func (s *signer) oidcToken(email, aud string, now time.Time) (string, error) {
	sub := subjectFor(email)
	return s.sign(OIDCClaims{
		RegisteredClaims: s.registered(sub, aud, now),
		Email:            email,
		EmailVerified:    true,
		AuthorizedParty:  sub,
	})
}

// oauthToken mints the access token for email with scope; its audience is
// the request URL.
func (s *signer) oauthToken(email, scope, aud string, now time.Time) (string, error) {
	if scope == "" {
		scope = defaultOAuthScope
	}
	return s.sign(oAuthClaims{
		RegisteredClaims: s.registered(subjectFor(email), aud, now),
		Email:            email,
		Scope:            scope,
	})
}
