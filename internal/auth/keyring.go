package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// MinKeySize is the smallest HMAC secret a KeyRing accepts, in bytes.
const MinKeySize = 32

// The environment variables of a KeyConfig, named in errors.
const (
	// EnvKeys holds the key ring as JSON (see ParseKeyRing).
	EnvKeys = "SERVO_TOKEN_KEYS"
	// EnvKeysFile holds the path of a file containing that JSON.
	EnvKeysFile = "SERVO_TOKEN_KEYS_FILE"
)

// ErrNoKeys is returned by LoadKeyRing when a KeyConfig names no ring.
var ErrNoKeys = errors.New("no task token keys configured: set " + EnvKeys + " (key ring JSON) or " + EnvKeysFile + " (path to it)")

// KeyRing holds the HMAC secrets tokens are signed and verified with,
// keyed by kid. The active key signs; any listed key verifies, so keys rotate
// without downtime. A KeyRing is immutable and safe for concurrent use; its
// String method never shows the secrets.
type KeyRing struct {
	active string
	keys   map[string][]byte
	// live, when set, holds the ring in force and re-reads it (see
	// NewReloadingKeyRing); active and keys are then unused.
	live *liveRing
}

// NewKeyRing returns a ring of keys, signing with keys[active]. Every kid
// must be non-empty, every secret at least MinKeySize bytes long, and active
// must be listed. The secrets are copied.
func NewKeyRing(active string, keys map[string][]byte) (*KeyRing, error) {
	if active == "" {
		return nil, errors.New("token: key ring: no active kid")
	}
	if _, ok := keys[active]; !ok {
		return nil, fmt.Errorf("token: key ring: active kid %q is not among the keys", active)
	}
	r := &KeyRing{active: active, keys: make(map[string][]byte, len(keys))}
	for kid, secret := range keys {
		if kid == "" {
			return nil, errors.New("token: key ring: empty kid")
		}
		if len(secret) < MinKeySize {
			return nil, fmt.Errorf("token: key ring: key %q is %d bytes, want at least %d", kid, len(secret), MinKeySize)
		}
		r.keys[kid] = bytes.Clone(secret)
	}
	return r, nil
}

// ringJSON is the configuration form of a KeyRing.
type ringJSON struct {
	Active string            `json:"active"`
	Keys   map[string]string `json:"keys"` // kid -> standard base64 secret
	// Meta is the keys' history (see Ring); a KeyRing does not use it.
	Meta map[string]KeyMeta `json:"meta,omitempty"`
}

// ParseKeyRing parses the JSON form of a key ring:
//
//	{"active":"k2","keys":{"k1":"<base64>","k2":"<base64>"}}
//
// where each key is standard (padded) base64. Errors never quote the input.
func ParseKeyRing(data []byte) (*KeyRing, error) {
	var j ringJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		// json errors name offsets and types, never values.
		return nil, fmt.Errorf("token: key ring: bad JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("token: key ring: bad JSON: trailing data")
	}
	keys := make(map[string][]byte, len(j.Keys))
	for kid, s := range j.Keys {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("token: key ring: key %q is not standard base64", kid)
		}
		keys[kid] = b
	}
	return NewKeyRing(j.Active, keys)
}

// KeyConfig says where a key ring comes from. The server reads it from
// SERVO_TOKEN_KEYS, SERVO_TOKEN_KEYS_FILE and SERVO_TOKEN_KEYS_SECRET
// (package config), hence the names in errors.
type KeyConfig struct {
	// JSON is the ring itself (see ParseKeyRing): SERVO_TOKEN_KEYS.
	JSON []byte
	// File names a file holding that JSON: SERVO_TOKEN_KEYS_FILE.
	File string
	// Secret names the Secret Manager secret (projects/P/secrets/S) whose
	// latest version OpenKeyRing re-reads: SERVO_TOKEN_KEYS_SECRET.
	Secret string
}

// LoadKeyRing loads the key ring c names: its JSON, or the file (read
// once). Both set is an error; neither returns an error wrapping
// ErrNoKeys. c.Secret is for OpenKeyRing and not read here.
func LoadKeyRing(c KeyConfig) (*KeyRing, error) {
	inline, file := len(c.JSON) > 0, c.File != ""
	switch {
	case inline && file:
		return nil, fmt.Errorf("token: both %s and %s are set; set one", EnvKeys, EnvKeysFile)
	case inline:
		r, err := ParseKeyRing(c.JSON)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvKeys, err)
		}
		return r, nil
	case file:
		b, err := os.ReadFile(c.File)
		if err != nil {
			return nil, fmt.Errorf("token: %s: %w", EnvKeysFile, err)
		}
		r, err := ParseKeyRing(b)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", EnvKeysFile, c.File, err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("token: %w", ErrNoKeys)
}

// GenerateKeyRing returns a ring with one random MinKeySize-byte key named
// kid, and the ring's JSON form for SERVO_TOKEN_KEYS. It is meant for the
// local stack and tests.
func GenerateKeyRing(kid string) (*KeyRing, []byte, error) {
	secret := make([]byte, MinKeySize)
	if _, err := rand.Read(secret); err != nil {
		return nil, nil, fmt.Errorf("token: generate key: %w", err)
	}
	r, err := NewKeyRing(kid, map[string][]byte{kid: secret})
	if err != nil {
		return nil, nil, err
	}
	data, err := r.marshal()
	if err != nil {
		return nil, nil, err
	}
	return r, data, nil
}

// marshal returns the ring in the form ParseKeyRing reads, secrets included.
// It is deliberately not MarshalJSON, so that a ring embedded in something
// logged as JSON marshals as {} rather than leaking its keys.
func (r *KeyRing) marshal() ([]byte, error) {
	j := ringJSON{Active: r.active, Keys: make(map[string]string, len(r.keys))}
	for kid, secret := range r.keys {
		j.Keys[kid] = base64.StdEncoding.EncodeToString(secret)
	}
	data, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("token: key ring: %w", err)
	}
	return data, nil
}

// Active returns the kid new tokens are signed with.
func (r *KeyRing) Active() string { return r.current().active }

// KIDs returns the kids of every key that verifies, sorted.
func (r KeyRing) KIDs() []string {
	if r.live != nil {
		return r.live.cur.Load().KIDs()
	}
	kids := make([]string, 0, len(r.keys))
	for kid := range r.keys {
		kids = append(kids, kid)
	}
	slices.Sort(kids)
	return kids
}

// String describes the ring by its kids only.
func (r KeyRing) String() string {
	if r.live != nil {
		return r.live.cur.Load().String()
	}
	return fmt.Sprintf("auth.KeyRing{active: %q, kids: %q}", r.active, r.KIDs())
}

// Format prints String for every verb (%v, %+v, %#v, %x, %d, ...), so that
// formatting a ring, or a struct holding one, never shows its secrets.
func (r KeyRing) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, r.String()) }
