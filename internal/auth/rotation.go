package auth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Errors of the ring operations, for errors.Is.
var (
	// ErrKeyExists: AddKey of a kid the ring already has.
	ErrKeyExists = errors.New("token: key ring: kid already in the ring")
	// ErrNoSuchKey: Activate or Retire of a kid the ring does not have.
	ErrNoSuchKey = errors.New("token: key ring: no such kid")
	// ErrRetireActive: Retire of the active kid.
	ErrRetireActive = errors.New("token: key ring: the active key cannot be retired; activate another first")
	// ErrRetireTooEarly: Retire of a key that may still have signed a
	// token that is valid, or whose deactivation time is unknown.
	ErrRetireTooEarly = errors.New("token: key ring: tokens signed with this key may still be valid")
)

// KeyMeta is the history of one key in a [Ring]: when it was created, when
// it last became active and when it last stopped being active. Zero times
// are unknown (a ring written before the history was kept).
type KeyMeta struct {
	CreatedAt     time.Time `json:"createdAt,omitzero"`
	ActivatedAt   time.Time `json:"activatedAt,omitzero"`
	DeactivatedAt time.Time `json:"deactivatedAt,omitzero"`
}

// Ring is the stored form of a key ring, as kept in a file or a Secret
// Manager secret and read by [ParseKeyRing]:
//
//	{"active":"k2","keys":{"k1":"<base64>","k2":"<base64>"},
//	 "meta":{"k1":{"createdAt":"…","activatedAt":"…","deactivatedAt":"…"},"k2":{…}}}
//
// "meta" is optional, so a ring of the older {"active","keys"} form is a
// Ring too. The operations on it (GenerateRing, AddKey, Activate, Retire)
// are pure: they return a new Ring and leave their argument alone. A Ring
// holds secrets: never log it; its String shows kids only.
type Ring struct {
	Active string             `json:"active"`
	Keys   map[string]string  `json:"keys"` // kid -> standard base64 secret
	Meta   map[string]KeyMeta `json:"meta,omitempty"`
}

// ParseRing parses the stored form, checking it as ParseKeyRing does.
func ParseRing(data []byte) (Ring, error) {
	if _, err := ParseKeyRing(data); err != nil {
		return Ring{}, err
	}
	var r Ring
	if err := json.Unmarshal(data, &r); err != nil {
		return Ring{}, fmt.Errorf("token: key ring: bad JSON: %w", err)
	}
	return r, nil
}

// Marshal returns the stored form, indented, checked by ParseKeyRing.
func (r Ring) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("token: key ring: %w", err)
	}
	if _, err := ParseKeyRing(data); err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// KIDs returns the ring's kids, sorted.
func (r Ring) KIDs() []string { return slices.Sorted(maps.Keys(r.Keys)) }

// String describes the ring by its kids and history, never its secrets.
func (r Ring) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "active %s", r.Active)
	for _, kid := range r.KIDs() {
		m := r.Meta[kid]
		fmt.Fprintf(&b, "\n  %s", kid)
		if kid == r.Active {
			b.WriteString(" (active)")
		}
		for _, f := range []struct {
			name string
			t    time.Time
		}{{"created", m.CreatedAt}, {"activated", m.ActivatedAt}, {"deactivated", m.DeactivatedAt}} {
			if !f.t.IsZero() {
				fmt.Fprintf(&b, " %s %s", f.name, f.t.UTC().Format(time.RFC3339))
			}
		}
	}
	return b.String()
}

// Format prints String for every verb, so that a Ring never shows its
// secrets when formatted.
func (r Ring) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, r.String()) }

// clone returns a deep copy of r.
func (r Ring) clone() Ring {
	out := Ring{Active: r.Active, Keys: maps.Clone(r.Keys), Meta: maps.Clone(r.Meta)}
	if out.Keys == nil {
		out.Keys = map[string]string{}
	}
	if out.Meta == nil {
		out.Meta = map[string]KeyMeta{}
	}
	return out
}

// newSecret reads a MinKeySize-byte secret from random (crypto/rand when nil).
func newSecret(random io.Reader) (string, error) {
	if random == nil {
		random = rand.Reader
	}
	b := make([]byte, MinKeySize)
	if _, err := io.ReadFull(random, b); err != nil {
		return "", fmt.Errorf("token: generate key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// ValidKeyID refuses a kid that Terraform's signing_keys variable would
// refuse: 1 to 32 letters, digits, '_' or '-' (the kid travels in every
// token's header and names the key in the secret).
func ValidKeyID(kid string) error {
	ok := len(kid) >= 1 && len(kid) <= 32
	for _, r := range kid {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}
	if !ok {
		return fmt.Errorf("token: key ring: kid %q must be 1 to 32 letters, digits, '_' or '-'", kid)
	}
	return nil
}

// GenerateRing returns a ring with one new random key, kid, active from now.
// random is the source of the secret (crypto/rand when nil).
func GenerateRing(kid string, now time.Time, random io.Reader) (Ring, error) {
	if err := ValidKeyID(kid); err != nil {
		return Ring{}, err
	}
	secret, err := newSecret(random)
	if err != nil {
		return Ring{}, err
	}
	return Ring{
		Active: kid,
		Keys:   map[string]string{kid: secret},
		Meta:   map[string]KeyMeta{kid: {CreatedAt: now.UTC(), ActivatedAt: now.UTC()}},
	}, nil
}

// AddKey returns r with a new random key, kid, that verifies but does not
// sign yet. Add it, let every instance pick the ring up, then Activate it.
func AddKey(r Ring, kid string, now time.Time, random io.Reader) (Ring, error) {
	if err := ValidKeyID(kid); err != nil {
		return Ring{}, err
	}
	if _, ok := r.Keys[kid]; ok {
		return Ring{}, fmt.Errorf("%w: %q", ErrKeyExists, kid)
	}
	secret, err := newSecret(random)
	if err != nil {
		return Ring{}, err
	}
	out := r.clone()
	out.Keys[kid] = secret
	out.Meta[kid] = KeyMeta{CreatedAt: now.UTC()}
	return out, nil
}

// Activate returns r with kid signing from now; the key active until now
// keeps verifying and records now as the time it stopped signing.
// Activating the active kid returns r unchanged.
func Activate(r Ring, kid string, now time.Time) (Ring, error) {
	if _, ok := r.Keys[kid]; !ok {
		return Ring{}, fmt.Errorf("%w: %q", ErrNoSuchKey, kid)
	}
	out := r.clone()
	if r.Active == kid {
		return out, nil
	}
	old := out.Meta[r.Active]
	old.DeactivatedAt = now.UTC()
	out.Meta[r.Active] = old
	m := out.Meta[kid]
	m.ActivatedAt, m.DeactivatedAt = now.UTC(), time.Time{}
	out.Meta[kid] = m
	out.Active = kid
	return out, nil
}

// RetireGrace is how long after a key stopped signing a token it signed may
// still be valid, given how long a running instance may keep signing with a
// ring it has not re-read (refresh) and the furthest ahead a token's
// validity may start (maxDelay: a retry scheduled ahead, [KeyRing.SignFrom]):
// refresh + maxDelay + MaxTaskTokenTTL + TaskTokenLeeway.
func RetireGrace(refresh, maxDelay time.Duration) time.Duration {
	return refresh + maxDelay + MaxTaskTokenTTL + TaskTokenLeeway
}

// RetireAt returns the earliest time kid may be retired with grace (see
// RetireGrace), and false when that is unknown (the key is active, or the
// ring does not record when it stopped being active).
func (r Ring) RetireAt(kid string, grace time.Duration) (time.Time, bool) {
	m := r.Meta[kid]
	if kid == r.Active || m.DeactivatedAt.IsZero() {
		return time.Time{}, false
	}
	return m.DeactivatedAt.Add(grace), true
}

// Retire returns r without kid. It refuses the active kid
// (ErrRetireActive), and, unless force is set, a grace shorter than a
// token's longest lifetime and a kid that stopped signing less than grace
// ago or at an unknown time (ErrRetireTooEarly).
func Retire(r Ring, kid string, now time.Time, grace time.Duration, force bool) (Ring, error) {
	if _, ok := r.Keys[kid]; !ok {
		return Ring{}, fmt.Errorf("%w: %q", ErrNoSuchKey, kid)
	}
	if kid == r.Active {
		return Ring{}, fmt.Errorf("%w (%q)", ErrRetireActive, kid)
	}
	if !force {
		if min := MaxTaskTokenTTL + TaskTokenLeeway; grace < min {
			return Ring{}, fmt.Errorf("%w: a grace of %v is shorter than a token's longest lifetime (%v); retire %q with a longer grace, or with force", ErrRetireTooEarly, grace, min, kid)
		}
		at, known := r.RetireAt(kid, grace)
		if !known {
			return Ring{}, fmt.Errorf("%w: the ring does not record when %q stopped signing (a ring from before key history was kept); retire it once %v have passed since, with force", ErrRetireTooEarly, kid, grace)
		}
		if now.Before(at) {
			return Ring{}, fmt.Errorf("%w: %q stopped signing at %s; retire it at %s or later", ErrRetireTooEarly, kid,
				r.Meta[kid].DeactivatedAt.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
		}
	}
	out := r.clone()
	delete(out.Keys, kid)
	delete(out.Meta, kid)
	return out, nil
}
