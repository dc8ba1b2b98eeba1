package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Dev identity tokens let `servo --as EMAIL` act as a principal against
// the local stack: servo dev generates a key per run (NewDevKey) and its
// control API accepts tokens signed with it; the deployed API is never
// given a dev key, so it never accepts one.
const (
	// DevIssuer and DevAudience are the dev tokens' iss and aud.
	DevIssuer   = "servo-dev"
	DevAudience = "servo-dev-api"
	// DevKeyEnv is the variable servo dev prints for the CLI (base64url).
	DevKeyEnv = "SERVO_DEV_IDENTITY_KEY"
	// DevTokenTTL is the lifetime of a dev token.
	DevTokenTTL = 10 * time.Minute
)

// ErrIdentityTokenExpired: an identity token past its expiry.
var ErrIdentityTokenExpired = errors.New("access: identity token expired")

// ErrInvalidIdentityToken: an identity token that is malformed, forged or
// not meant for this API.
var ErrInvalidIdentityToken = errors.New("access: invalid identity token")

// NewDevKey returns a fresh random 32-byte dev signing key.
func NewDevKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

type devClaims struct {
	Email string `json:"email"`
	jwt.RegisteredClaims
}

// SignDev returns a dev identity token for email, valid for ttl from now.
func SignDev(key []byte, email string, now time.Time, ttl time.Duration) (string, error) {
	c := devClaims{Email: email, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: DevIssuer, Audience: jwt.ClaimStrings{DevAudience}, Subject: email,
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("access: sign dev token: %w", err)
	}
	return s, nil
}

// VerifyDev checks a dev identity token against key and returns its
// e-mail: ErrIdentityTokenExpired past its expiry, ErrInvalidIdentityToken
// for anything else wrong (signature, algorithm, issuer, audience, no
// e-mail).
func VerifyDev(key []byte, raw string, now time.Time) (string, error) {
	var c devClaims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(DevIssuer), jwt.WithAudience(DevAudience),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return now }))
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", ErrIdentityTokenExpired
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrInvalidIdentityToken, err)
	case c.Email == "":
		return "", fmt.Errorf("%w: no email claim", ErrInvalidIdentityToken)
	}
	return c.Email, nil
}
