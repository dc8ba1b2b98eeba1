package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPolicyRoles(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"principals": {
		"Viewer@Example.com": {"a": "viewer"},
		"sub@example.com": {"a": "submitter", "b": "viewer"},
		"ops@example.com": {"*": "operator"},
		"*": {"public": "viewer"}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who, tenant string
		a           Action
		want        bool
	}{
		{"viewer@example.com", "a", View, true},
		{"viewer@example.com", "a", Submit, false},
		{"viewer@example.com", "b", View, false},
		{"viewer@example.com", "public", View, true},
		{"sub@example.com", "a", Submit, true},
		{"sub@example.com", "a", Operate, false},
		{"sub@example.com", "b", Submit, false},
		{"ops@example.com", "anything", Operate, true},
		{"", "public", View, false},
		{"nobody@example.com", "a", View, false},
	} {
		if got := p.Allows(c.who, c.tenant, c.a); got != c.want {
			t.Errorf("%q %s on %q: %v, want %v", c.who, c.a, c.tenant, got, c.want)
		}
	}
	if all, ts := p.Tenants("sub@example.com", View); all || !slices.Equal(ts, []string{"a", "b", "public"}) {
		t.Errorf("sub views %v %v", all, ts)
	}
	if all, ts := p.Tenants("sub@example.com", Submit); all || !slices.Equal(ts, []string{"a"}) {
		t.Errorf("sub submits to %v %v", all, ts)
	}
	if all, _ := p.Tenants("ops@example.com", View); !all {
		t.Error("ops does not view every tenant")
	}
	if !OpenPolicy().Allows("", "x", Operate) || !(*Policy)(nil).Allows("", "x", Operate) {
		t.Error("the open policy refuses")
	}
	for _, bad := range []string{
		`{"principals": {"alice": {"a": "viewer"}}}`,
		`{"principals": {"a@x.com": {"a": "admin"}}}`,
		`{"principals": {"a@x.com": {"": "viewer"}}}`,
		`{"principal": {}}`,
	} {
		if _, err := ParsePolicy([]byte(bad)); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParsePolicy(%s): %v, want ErrInvalidPolicy", bad, err)
		}
	}
}

func TestDevTokens(t *testing.T) {
	key, other := NewDevKey(), NewDevKey()
	now := time.Now()
	good, _ := SignDev(key, "a@x.com", now, time.Minute)
	forged, _ := SignDev(other, "a@x.com", now, time.Minute)
	old, _ := SignDev(key, "a@x.com", now.Add(-time.Hour), time.Minute)
	for _, c := range []struct {
		name, tok string
		want      error
	}{
		{"good", good, nil}, {"forged", forged, ErrInvalidIdentityToken}, {"expired", old, ErrIdentityTokenExpired}, {"garbage", "x.y.z", ErrInvalidIdentityToken},
	} {
		email, err := VerifyDev(key, c.tok, now)
		if !errors.Is(err, c.want) || (c.want == nil && email != "a@x.com") {
			t.Errorf("%s: %q %v, want %v", c.name, email, err, c.want)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"principals": {"v@x.com": {"secret-tenant": "viewer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check("v@x.com", "secret-tenant", View); err != nil {
		t.Errorf("a viewer viewing: %v", err)
	}
	for _, c := range []struct {
		who  string
		a    Action
		want string
	}{
		{"v@x.com", Submit, "v@x.com may not submit this tenant's tasks (needs the submitter role)"},
		{"", View, "the anonymous caller may not view this tenant's tasks (needs the viewer role)"},
		{"v@x.com", Operate, "v@x.com may not operate this tenant's tasks (needs the operator role)"},
	} {
		err := p.Check(c.who, "secret-tenant", c.a)
		var pe *PermissionError
		if !errors.As(err, &pe) || err.Error() != c.want || strings.Contains(err.Error(), "secret-tenant") {
			t.Errorf("Check(%q, %s) = %v, want %q", c.who, c.a, err, c.want)
		}
	}
	if err := OpenPolicy().Check("", "t", Operate); err != nil {
		t.Errorf("the open policy refuses: %v", err)
	}
}
