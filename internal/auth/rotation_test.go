package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var rt0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// storedRing marshals and re-parses r, as a file or secret would hold it.
func storedRing(t *testing.T) func(Ring, error) Ring {
	return func(r Ring, err error) Ring { return stored(t, r, err) }
}

func stored(t *testing.T, r Ring, err error) Ring {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRing(data)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func TestRingRotation(t *testing.T) {
	grace := RetireGrace(DefaultRefresh, time.Hour)
	r1 := storedRing(t)(GenerateRing("k1", rt0, nil))
	r2 := storedRing(t)(AddKey(r1, "k2", rt0.Add(time.Minute), nil))
	r3 := storedRing(t)(Activate(r2, "k2", rt0.Add(time.Hour)))

	if r2.Active != "k1" || len(r2.Keys) != 2 || r1.Keys["k2"] != "" {
		t.Fatalf("AddKey: got %v from %v; want k2 added, k1 still active, the argument unchanged", r2, r1)
	}
	if r3.Active != "k2" || !r3.Meta["k1"].DeactivatedAt.Equal(rt0.Add(time.Hour)) || !r3.Meta["k2"].ActivatedAt.Equal(rt0.Add(time.Hour)) {
		t.Fatalf("Activate: got %v", r3)
	}
	if r2.Active != "k1" {
		t.Fatal("Activate changed its argument")
	}
	// The ring's keys sign and verify across the steps: a token signed by
	// k1 verifies with the ring that made k2 active.
	kr2, _ := ParseKeyRing(mustJSON(t, r2))
	kr3, _ := ParseKeyRing(mustJSON(t, r3))
	tok, _, err := kr2.Sign(scope0, time.Minute, rt0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr3.Verify(tok, rt0); err != nil {
		t.Fatalf("a k1 token after k2 was activated: %v", err)
	}

	tests := []struct {
		name  string
		ring  Ring
		kid   string
		now   time.Time
		force bool
		want  error
	}{
		{"active key", r3, "k2", rt0.Add(100 * time.Hour), false, ErrRetireActive},
		{"active key, forced", r3, "k2", rt0.Add(100 * time.Hour), true, ErrRetireActive},
		{"unknown key", r3, "k9", rt0, false, ErrNoSuchKey},
		{"within the grace", r3, "k1", rt0.Add(time.Hour + grace - time.Second), false, ErrRetireTooEarly},
		{"within the grace, forced", r3, "k1", rt0.Add(time.Hour), true, nil},
		{"after the grace", r3, "k1", rt0.Add(time.Hour + grace), false, nil},
		{"never deactivated (old ring)", Ring{Active: "k2", Keys: r3.Keys}, "k1", rt0.Add(1000 * time.Hour), false, ErrRetireTooEarly},
		{"added, never active", r2, "k2", rt0.Add(1000 * time.Hour), false, ErrRetireTooEarly},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Retire(tc.ring, tc.kid, tc.now, grace, tc.force)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Retire(%s) = %v, want %v", tc.kid, err, tc.want)
			}
			if err != nil {
				return
			}
			if _, ok := got.Keys[tc.kid]; ok || len(got.Keys) != len(tc.ring.Keys)-1 {
				t.Fatalf("Retire(%s) kept it: %v", tc.kid, got)
			}
			if _, ok := tc.ring.Keys[tc.kid]; !ok {
				t.Fatal("Retire changed its argument")
			}
			if kr, err := ParseKeyRing(mustJSON(t, got)); err != nil {
				t.Fatal(err)
			} else if _, err := kr.Verify(tok, rt0); !errors.Is(err, ErrInvalidTaskToken) {
				t.Fatalf("a k1 token after k1 was retired: %v, want ErrInvalidTaskToken", err)
			}
		})
	}

	if _, err := AddKey(r3, "k1", rt0, nil); !errors.Is(err, ErrKeyExists) {
		t.Errorf("AddKey of an existing kid: %v", err)
	}
	if _, err := Activate(r3, "nope", rt0); !errors.Is(err, ErrNoSuchKey) {
		t.Errorf("Activate of an unknown kid: %v", err)
	}
	for _, s := range []string{r3.String(), fmt.Sprintf("%v %+v %#v", r3, r3, r3)} {
		for _, secret := range r3.Keys {
			if strings.Contains(s, secret) {
				t.Fatalf("String shows a secret: %s", s)
			}
		}
	}
}

func TestParseRingOldForm(t *testing.T) {
	_, data, err := GenerateKeyRing("k1")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRing(data)
	if err != nil || r.Active != "k1" || len(r.Keys) != 1 || len(r.Meta) != 0 {
		t.Fatalf("ParseRing of {active, keys}: %v, %v", r, err)
	}
	if _, err := ParseRing([]byte(`{"active":"k1","keys":{},"other":1}`)); err == nil {
		t.Fatal("ParseRing accepted an unknown field")
	}
}

func mustJSON(t *testing.T, r Ring) []byte {
	t.Helper()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReloadingKeyRing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ring.json")
	r1 := storedRing(t)(GenerateRing("k1", rt0, nil))
	if err := os.WriteFile(path, mustJSON(t, r1), 0o600); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	src := func(ctx context.Context) ([]byte, error) {
		reads.Add(1)
		return RingFileSource(path)(ctx)
	}
	live, err := NewReloadingKeyRing(context.Background(), nil, src, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clock := rt0
	live.live.now = func() time.Time { return clock }
	live.live.nextRefresh.Store(clock.Add(time.Hour).UnixNano())
	if reads.Load() != 1 {
		t.Fatalf("reads after open = %d, want 1", reads.Load())
	}

	// Another instance adds and activates k2 and signs with it.
	r2 := storedRing(t)(Activate(storedRing(t)(AddKey(r1, "k2", rt0, nil)), "k2", rt0))
	if err := os.WriteFile(path, mustJSON(t, r2), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := ParseKeyRing(mustJSON(t, r2))
	tok, _, _ := other.Sign(scope0, time.Minute, rt0)

	if live.Active() != "k1" {
		t.Fatalf("active before any re-read = %s", live.Active())
	}
	if _, err := live.Verify(tok, rt0); err != nil {
		t.Fatalf("a k2 token: %v (the ring must re-read on a kid miss)", err)
	}
	if reads.Load() != 2 || live.Active() != "k2" {
		t.Fatalf("after the miss: reads %d, active %s; want 2, k2", reads.Load(), live.Active())
	}
	mine, _, _ := live.Sign(scope0, time.Minute, rt0)
	if c, err := other.Verify(mine, rt0); err != nil || c.TaskID != scope0.TaskID {
		t.Fatalf("the reloaded ring signs with k2: %v", err)
	}

	// Unknown kids re-read at most once per MissReloadGap.
	bogus, _ := ParseKeyRing(mustJSON(t, storedRing(t)(GenerateRing("nope", rt0, nil))))
	bad, _, _ := bogus.Sign(scope0, time.Minute, rt0)
	clock = clock.Add(MissReloadGap)
	for range 5 {
		if _, err := live.Verify(bad, rt0); !errors.Is(err, ErrInvalidTaskToken) {
			t.Fatalf("unknown kid: %v", err)
		}
	}
	if reads.Load() != 3 {
		t.Fatalf("reads after 5 unknown kids = %d, want 3 (one re-read)", reads.Load())
	}
	clock = clock.Add(MissReloadGap)
	_, _ = live.Verify(bad, rt0)
	if reads.Load() != 4 {
		t.Fatalf("reads after the gap = %d, want 4", reads.Load())
	}

	// A broken source keeps the ring in force.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(MissReloadGap)
	_, _ = live.Verify(bad, rt0)
	if live.ReloadError() == nil || live.Active() != "k2" {
		t.Fatalf("after a bad re-read: err %v, active %s", live.ReloadError(), live.Active())
	}

	// The periodic refresh re-reads in the background.
	if err := os.WriteFile(path, mustJSON(t, storedRing(t)(Activate(r2, "k1", rt0))), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Hour)
	live.Active() // due: starts the refresh
	deadline := time.Now().Add(30 * time.Second)
	for live.Active() != "k1" {
		if time.Now().After(deadline) {
			t.Fatal("the periodic refresh did not pick up k1 as active")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOpenKeyRing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ring.json")
	r1 := storedRing(t)(GenerateRing("k1", rt0, nil))
	if err := os.WriteFile(path, mustJSON(t, r1), 0o600); err != nil {
		t.Fatal(err)
	}
	var secretReads atomic.Int32
	secret := func(name string) RingSource {
		return func(ctx context.Context) ([]byte, error) {
			secretReads.Add(1)
			if name != "projects/p/secrets/s" {
				t.Errorf("secret name %q", name)
			}
			return mustJSON(t, r1), nil
		}
	}
	tests := []struct {
		name      string
		c         KeyConfig
		reads     int32
		reloading bool
		wantErr   bool
	}{
		{"secret with the env copy: no read", KeyConfig{Secret: "projects/p/secrets/s", JSON: mustJSON(t, r1)}, 0, true, false},
		{"secret alone: one read", KeyConfig{Secret: "projects/p/secrets/s"}, 1, true, false},
		{"secret and file", KeyConfig{Secret: "projects/p/secrets/s", File: path}, 0, false, true},
		{"file", KeyConfig{File: path}, 0, true, false},
		{"file and json", KeyConfig{File: path, JSON: mustJSON(t, r1)}, 0, false, true},
		{"inline", KeyConfig{JSON: mustJSON(t, r1)}, 0, false, false},
		{"nothing", KeyConfig{}, 0, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			secretReads.Store(0)
			r, err := OpenKeyRing(context.Background(), tc.c, secret)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				return
			}
			if secretReads.Load() != tc.reads || (r.live != nil) != tc.reloading || r.Active() != "k1" {
				t.Fatalf("reads %d reloading %v active %s", secretReads.Load(), r.live != nil, r.Active())
			}
		})
	}
}

// The CLI refuses the kids Terraform's signing_keys variable refuses
// (terraform/variables.tf: ^[A-Za-z0-9_-]{1,32}$), at generate and at add.
func TestValidKeyID(t *testing.T) {
	tf, err := os.ReadFile("../../terraform/variables.tf")
	if err != nil || !strings.Contains(string(tf), `regex("^[A-Za-z0-9_-]{1,32}$", id)`) {
		t.Fatalf("terraform/variables.tf no longer holds the kid rule ValidKeyID copies (%v)", err)
	}
	for kid, ok := range map[string]bool{
		"k1": true, "K_2-x": true, strings.Repeat("a", 32): true,
		"": false, "bad kid!": false, strings.Repeat("a", 33): false, "k/1": false, "é": false, "k.1": false,
	} {
		if err := ValidKeyID(kid); (err == nil) != ok {
			t.Errorf("ValidKeyID(%q) = %v", kid, err)
		}
		_, gerr := GenerateRing(kid, time.Now(), nil)
		r, _ := GenerateRing("k0", time.Now(), nil)
		_, aerr := AddKey(r, kid, time.Now(), nil)
		if (gerr == nil) != ok || (aerr == nil) != ok {
			t.Errorf("%q: generate %v, add %v", kid, gerr, aerr)
		}
	}
}
