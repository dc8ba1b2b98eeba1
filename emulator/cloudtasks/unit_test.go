package cloudtasks

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
)

func TestApplyURIOverride(t *testing.T) {
	str := func(s string) *string { return &s }
	port := func(p int64) *int64 { return &p }
	plain := pb.UriOverride_HTTP
	tests := []struct {
		name string
		in   string
		o    *pb.UriOverride
		want string
	}{
		{"no override", "https://a.example/x?y=1", nil, "https://a.example/x?y=1"},
		{"host", "https://a.example:8443/x", &pb.UriOverride{Host: str("b.example")}, "https://b.example:8443/x"},
		{"port zero clears the port", "https://a.example:8443/x", &pb.UriOverride{Port: port(0)}, "https://a.example/x"},
		{"scheme port path query", "https://a.example/x?y=1", &pb.UriOverride{Scheme: &plain, Port: port(8080),
			PathOverride: &pb.PathOverride{Path: "/p"}, QueryOverride: &pb.QueryOverride{QueryParams: "q=2"}}, "http://a.example:8080/p?q=2"},
		{"empty path and query clear them", "https://a.example/x?y=1", &pb.UriOverride{
			PathOverride: &pb.PathOverride{}, QueryOverride: &pb.QueryOverride{}}, "https://a.example"},
		{"IF_NOT_EXISTS keeps a task url", "https://a.example/x", &pb.UriOverride{Host: str("b.example"),
			UriOverrideEnforceMode: pb.UriOverride_IF_NOT_EXISTS}, "https://a.example/x"},
		{"IF_NOT_EXISTS fills a missing url", "", &pb.UriOverride{Host: str("b.example"),
			PathOverride: &pb.PathOverride{Path: "/p"}, UriOverrideEnforceMode: pb.UriOverride_IF_NOT_EXISTS}, "https://b.example/p"},
	}
	for _, tc := range tests {
		got, err := applyURIOverride(tc.in, tc.o)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":    0,
		"120": 2 * time.Minute,
		"-5":  0,
		"1.5": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	}
	for in, want := range tests {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestFormatETA(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	if got := formatETA(at); got != "1700000000.123456" {
		t.Errorf("formatETA = %s", got)
	}
}

func TestFakeClock(t *testing.T) {
	c := NewFakeClock(fakeStart)
	var fired []int
	c.AfterFunc(2*time.Second, func() { fired = append(fired, 2) })
	c.AfterFunc(time.Second, func() { fired = append(fired, 1) })
	stopped := c.AfterFunc(time.Second, func() { fired = append(fired, 99) })
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop should succeed once")
	}
	if p := c.Pending(); len(p) != 2 || !p[0].Equal(fakeStart.Add(time.Second)) {
		t.Errorf("Pending = %v", p)
	}
	c.Advance(1500 * time.Millisecond)
	if len(fired) != 1 || fired[0] != 1 {
		t.Errorf("after 1.5s fired %v", fired)
	}
	c.AdvanceTo(fakeStart.Add(time.Hour))
	if len(fired) != 2 || !c.Now().Equal(fakeStart.Add(time.Hour)) {
		t.Errorf("fired %v at %v", fired, c.Now())
	}
}

func TestParseNames(t *testing.T) {
	good := []string{
		"projects/my-project/locations/us-central1/queues/q-1/tasks/Task_1-x",
		"projects/example.com:proj/locations/europe-west1/queues/Q/tasks/1",
	}
	for _, n := range good {
		if _, err := parseTaskName(n); err != nil {
			t.Errorf("parseTaskName(%q): %v", n, err)
		}
	}
	bad := []string{
		"projects/p/locations/l/queues/q/tasks/",
		"projects/p/locations/l/queues/q_1/tasks/t",
		"projects/p/locations/l_1/queues/q/tasks/t",
		"projects/p/locations/l/queues/q/tasks/t.1",
		"projects/p/locations/l/queues/q/tasks/t/extra",
		"projects//locations/l/queues/q/tasks/t",
	}
	for _, n := range bad {
		if _, err := parseTaskName(n); err == nil {
			t.Errorf("parseTaskName(%q) accepted", n)
		}
	}
}

func TestOIDCAudienceIsAString(t *testing.T) {
	c := OIDCClaims{Email: "sa@p.iam.gserviceaccount.com"}
	c.Audience = []string{"https://worker.example/"}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if aud, ok := m["aud"].(string); !ok || aud != "https://worker.example/" || m["email"] != c.Email {
		t.Fatalf("claims %s: aud must be a plain string", b)
	}
}

func TestIDGrammar(t *testing.T) {
	for _, tc := range []struct {
		g    idGrammar
		s    string
		want bool
	}{
		{projectIDRe, "my-project", true},
		{projectIDRe, "example.com:my-project", true},
		{projectIDRe, "", false},
		{projectIDRe, "my_project", false},
		{locationIDRe, "europe-west1", true},
		{locationIDRe, "europe.west1", false},
		{queueIDRe, strings.Repeat("q", 100), true},
		{queueIDRe, strings.Repeat("q", 101), false},
		{queueIDRe, "servo-worker-example", true},
		{queueIDRe, "a/b", false},
		{taskIDRe, "task_01J-x", true},
		{taskIDRe, strings.Repeat("t", 500), true},
		{taskIDRe, strings.Repeat("t", 501), false},
		{taskIDRe, "tâche", false},
		{taskIDRe, "a b", false},
	} {
		if got := tc.g.MatchString(tc.s); got != tc.want {
			t.Errorf("%+v.MatchString(%q) = %v, want %v", tc.g, tc.s, got, tc.want)
		}
	}
}
