package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewKeyRing(t *testing.T) {
	tests := []struct {
		name    string
		active  string
		keys    map[string][]byte
		wantErr bool
	}{
		{name: "one key", active: "k1", keys: map[string][]byte{"k1": key1}},
		{name: "two keys", active: "k2", keys: map[string][]byte{"k1": key1, "k2": key2}},
		{name: "long key", active: "k1", keys: map[string][]byte{"k1": bytes.Repeat([]byte{7}, 64)}},
		{name: "no keys", active: "k1", keys: nil, wantErr: true},
		{name: "no active", active: "", keys: map[string][]byte{"k1": key1}, wantErr: true},
		{name: "active not listed", active: "k2", keys: map[string][]byte{"k1": key1}, wantErr: true},
		{name: "empty kid", active: "k1", keys: map[string][]byte{"k1": key1, "": key2}, wantErr: true},
		{name: "short key", active: "k1", keys: map[string][]byte{"k1": key1[:31]}, wantErr: true},
		{name: "short inactive key", active: "k1", keys: map[string][]byte{"k1": key1, "k0": []byte("secret")}, wantErr: true},
	}
	for _, tt := range tests {
		r, err := NewKeyRing(tt.active, tt.keys)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", tt.name, err, tt.wantErr)
			continue
		}
		if err == nil && r.Active() != tt.active {
			t.Errorf("%s: Active() = %q", tt.name, r.Active())
		}
	}
}

func TestNewKeyRingCopiesKeys(t *testing.T) {
	k := bytes.Clone(key1)
	r := mustRing(t, "k1", map[string][]byte{"k1": k})
	tok, _, err := r.Sign(scope0, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	k[0] ^= 0xff
	if _, err := r.Verify(tok, t0); err != nil {
		t.Errorf("ring changed when the caller's slice did: %v", err)
	}
}

func ringJSONFor(active string, keys map[string][]byte) string {
	j := ringJSON{Active: active, Keys: map[string]string{}}
	for k, v := range keys {
		j.Keys[k] = base64.StdEncoding.EncodeToString(v)
	}
	b, _ := json.Marshal(j)
	return string(b)
}

func TestParseKeyRing(t *testing.T) {
	good := ringJSONFor("k2", map[string][]byte{"k1": key1, "k2": key2})
	tests := []struct {
		name    string
		data    string
		wantErr bool
	}{
		{name: "valid", data: good},
		{name: "valid, whitespace", data: "\n  " + good + "\n"},
		{name: "empty", data: "", wantErr: true},
		{name: "not JSON", data: "k1=abc", wantErr: true},
		{name: "trailing data", data: good + good, wantErr: true},
		{name: "unknown field", data: `{"active":"k1","keys":{"k1":"` + base64.StdEncoding.EncodeToString(key1) + `"},"extra":1}`, wantErr: true},
		{name: "raw url base64", data: `{"active":"k1","keys":{"k1":"` + base64.RawURLEncoding.EncodeToString(append(bytes.Clone(key1), 0xfb, 0xff)) + `"}}`, wantErr: true},
		{name: "short key", data: ringJSONFor("k1", map[string][]byte{"k1": key1[:16]}), wantErr: true},
		{name: "active missing", data: ringJSONFor("k3", map[string][]byte{"k1": key1}), wantErr: true},
		{name: "no keys", data: `{"active":"k1"}`, wantErr: true},
	}
	for _, tt := range tests {
		r, err := ParseKeyRing([]byte(tt.data))
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", tt.name, err, tt.wantErr)
			continue
		}
		if err != nil {
			for _, k := range [][]byte{key1, key2} {
				if enc := base64.StdEncoding.EncodeToString(k); strings.Contains(err.Error(), enc[:12]) {
					t.Errorf("%s: error %q quotes a key", tt.name, err)
				}
			}
			continue
		}
		if r.Active() != "k2" || fmt.Sprint(r.KIDs()) != "[k1 k2]" {
			t.Errorf("%s: ring = %v", tt.name, r)
		}
	}

	// The parsed ring verifies what an equal ring signed.
	r, err := ParseKeyRing([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := mustRing(t, "k1", map[string][]byte{"k1": key1}).Sign(scope0, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Verify(tok, t0); err != nil {
		t.Errorf("parsed ring rejects a k1 token: %v", err)
	}
}

func TestLoadKeyRing(t *testing.T) {
	good := ringJSONFor("k1", map[string][]byte{"k1": key1})
	file := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		json, path string
		wantErr    error // nil: success; errAny: some error
		wantText   []string
	}{
		{name: "json", json: good},
		{name: "file", path: file},
		{name: "neither", wantErr: ErrNoKeys, wantText: []string{EnvKeys, EnvKeysFile}},
		{name: "both", json: good, path: file, wantErr: errAny, wantText: []string{EnvKeys, EnvKeysFile}},
		{name: "bad json", json: "{", wantErr: errAny, wantText: []string{EnvKeys}},
		{name: "missing file", path: file + ".nope", wantErr: os.ErrNotExist, wantText: []string{EnvKeysFile}},
		{name: "bad file", path: bad, wantErr: errAny, wantText: []string{EnvKeysFile, bad}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := LoadKeyRing(KeyConfig{JSON: []byte(tt.json), File: tt.path})
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("LoadKeyRing: %v", err)
			case tt.wantErr == nil:
				if r.Active() != "k1" {
					t.Errorf("Active() = %q", r.Active())
				}
				return
			case err == nil:
				t.Fatalf("LoadKeyRing succeeded, want error")
			case tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err %q does not name %q", err, s)
				}
			}
		})
	}
}

var errAny = errors.New("any error")

// setenv sets (or, for unset, removes) an environment variable for the
// duration of the test.
func TestGenerateKeyRing(t *testing.T) {
	r, data, err := GenerateKeyRing("local")
	if err != nil {
		t.Fatal(err)
	}
	if r.Active() != "local" {
		t.Errorf("Active() = %q", r.Active())
	}
	parsed, err := ParseKeyRing(data)
	if err != nil {
		t.Fatalf("ParseKeyRing(GenerateKeyRing JSON): %v", err)
	}
	tok, _, err := r.Sign(scope0, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parsed.Verify(tok, t0); err != nil {
		t.Errorf("ring parsed from the generated JSON rejects the generated ring's token: %v", err)
	}
	other, _, err := GenerateKeyRing("local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify(tok, t0); !errors.Is(err, ErrInvalidTaskToken) {
		t.Errorf("two generated rings share a key")
	}
	if _, _, err := GenerateKeyRing(""); err == nil {
		t.Errorf("GenerateKeyRing(\"\") succeeded")
	}
}

func TestKeyRingNeverPrintsSecrets(t *testing.T) {
	r := mustRing(t, "k2", map[string][]byte{"k1": key1, "k2": key2})
	holder := struct {
		Ring  *KeyRing
		Value KeyRing
	}{r, *r}
	js, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	outputs := []string{
		fmt.Sprint(r), fmt.Sprintf("%+v", r), fmt.Sprintf("%#v", r), fmt.Sprintf("%x", r), fmt.Sprintf("%d", r),
		fmt.Sprint(*r), fmt.Sprintf("%+v", *r), fmt.Sprintf("%#v", *r), fmt.Sprintf("%x", *r), fmt.Sprintf("%v", holder),
		fmt.Sprintf("%+v", holder), string(js),
	}
	for _, out := range outputs {
		for _, k := range [][]byte{key1, key2} {
			if strings.Contains(out, string(k)) ||
				strings.Contains(out, base64.StdEncoding.EncodeToString(k)) ||
				strings.Contains(out, fmt.Sprintf("%x", k)) ||
				strings.Contains(out, fmt.Sprint(k)) ||
				strings.Contains(out, fmt.Sprintf("%v", k[:8])[1:12]) {
				t.Errorf("output %q shows a secret", out)
			}
		}
	}
	if got := fmt.Sprint(r); !strings.Contains(got, "k1") || !strings.Contains(got, "k2") {
		t.Errorf("String() = %q, want the kids", got)
	}
}
