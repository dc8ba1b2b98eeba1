package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/dispatcher"
)

const ring = `{"active":"k1","keys":{"k1":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}}`

// required is the least environment FromEnv accepts.
var required = map[string]string{
	EnvProject:         "p1",
	EnvTokenKeys:       ring,
	EnvCallbackBaseURL: "https://callbacks.example.com",
}

// env returns a getenv of required with changes (an empty value unsets).
func env(changes map[string]string) func(string) string {
	m := map[string]string{}
	for k, v := range required {
		m[k] = v
	}
	for k, v := range changes {
		m[k] = v
	}
	return func(name string) string { return m[name] }
}

func TestFromEnvDefaults(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	if c.Project != "p1" || c.CallbackBaseURL.String() != "https://callbacks.example.com" || string(c.TokenKeys.JSON) != ring {
		t.Errorf("required values: %+v", c)
	}
	if c.FirestoreDatabase != "(default)" || c.EventsTopic != "servo-task-events" || c.DeadLetterTopic != "servo-dead-letter" ||
		c.SweepEvery != 15*time.Second || c.SweepWindow != 55*time.Second || c.MaxRedrives != 5 || c.StartTimeout != 10*time.Minute ||
		c.DueShards != 384 || c.MaxBodyBytes != 1<<20 || c.RetentionDays != 30 || c.ServiceName != "servo" || c.Access != nil || c.Quotas == nil || c.Quotas.Enabled() ||
		len(c.Workers) != 0 || c.JobsDispatchURL != nil ||
		!c.SweepEarlyEnd || c.LogHeartbeats || c.LogStarted || c.TraceSampling.Ratio != 0.01 || c.TraceSampling.Slow != time.Second {
		t.Errorf("defaults: got %+v, want %+v", c, want)
	}
	// The handlers' own defaults are the documented ones.
	for pkg, n := range map[string]int64{"dispatcher": dispatcher.DefaultMaxBodyBytes, "callbacks": callbacks.DefaultMaxBodyBytes} {
		if n != want.MaxBodyBytes {
			t.Errorf("DefaultMaxBodyBytes %d, %s's %d", want.MaxBodyBytes, pkg, n)
		}
	}
	// The variable the Cloud Tasks emulator prints is the one read here.
	if EnvCloudTasksEmulator != cloudtasks.EnvVar {
		t.Errorf("EnvCloudTasksEmulator %s, emulator's %s", EnvCloudTasksEmulator, cloudtasks.EnvVar)
	}
}

func TestFromEnvValues(t *testing.T) {
	dir := t.TempDir()
	accessFile := filepath.Join(dir, "access.json")
	if err := os.WriteFile(accessFile, []byte(`{"principals":{"alice@example.com":{"acme":"viewer"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := FromEnv(env(map[string]string{
		EnvProject:            "",
		EnvGoogleCloudProject: "p2",
		EnvFirestoreDatabase:  "db",
		EnvTokenKeys:          "",
		EnvTokenKeysSecret:    "projects/p2/secrets/keys",
		EnvWorkers:            `{"render":{"job":"projects/servo-p2/locations/l/jobs/render","queue":"projects/servo-p2/locations/l/queues/render"}}`,
		EnvJobsDispatchURL:    "https://jobs.example.com/dispatch",
		EnvJobsContainer:      "worker",
		EnvEventsTopic:        "ev",
		EnvDeadLetterTopic:    "dl",
		EnvSweepEvery:         "2s",
		EnvSweepWindow:        "0",
		EnvSweepEarlyEnd:      "false",
		EnvTraceSampleRatio:   "0.05",
		EnvTraceSlow:          "250ms",
		EnvLogHeartbeats:      "true",
		EnvLogStarted:         "true",
		EnvMaxRedrives:        "7",
		EnvStartTimeout:       "3m",
		EnvStoreTimeout:       "4s",
		EnvDueShards:          "32",
		EnvMaxBodyBytes:       "2048",
		EnvRetentionDays:      "90",
		EnvClaimAudience:      "https://claim.example.com",
		EnvAccessFile:         accessFile,
		EnvAPIAudience:        "https://api.example.com",
		EnvQuotas:             `{"tenants":{"acme":{"maxRunning":3}}}`,
		EnvService:            "servo-api",
		EnvCloudTasksEmulator: "127.0.0.1:9",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, check := range []struct {
		name string
		ok   bool
	}{
		{"project from GOOGLE_CLOUD_PROJECT", c.Project == "p2"},
		{"database", c.FirestoreDatabase == "db"},
		{"token keys", c.TokenKeys.Secret == "projects/p2/secrets/keys" && c.TokenKeys.JSON == nil && c.TokenKeys.File == ""},
		{"workers", c.Workers["render"].Job == "projects/servo-p2/locations/l/jobs/render"},
		{"jobs", c.JobsDispatchURL.String() == "https://jobs.example.com/dispatch" && c.JobsContainer == "worker"},
		{"topics", c.EventsTopic == "ev" && c.DeadLetterTopic == "dl"},
		{"sweeper", c.SweepEvery == 2*time.Second && c.SweepWindow == 0 && c.MaxRedrives == 7},
		{"early end, heartbeat and started lines", !c.SweepEarlyEnd && c.LogHeartbeats && c.LogStarted},
		{"trace sampling", c.TraceSampling.Ratio == 0.05 && c.TraceSampling.Slow == 250*time.Millisecond},
		{"start timeout", c.StartTimeout == 3*time.Minute},
		{"store timeout", c.StoreTimeout == 4*time.Second},
		{"shards, body", c.DueShards == 32 && c.MaxBodyBytes == 2048},
		{"retention", c.RetentionDays == 90},
		{"audiences", c.ClaimAudience == "https://claim.example.com" && slices.Equal(c.APIAudiences, []string{"https://api.example.com"})},
		{"access from its file", !c.Access.IsOpen()},
		{"quotas", c.Quotas.Enabled()},
		{"service", c.ServiceName == "servo-api"},
		{"cloud tasks emulator", c.CloudTasksEmulatorHost == "127.0.0.1:9"},
	} {
		if !check.ok {
			t.Errorf("%s: %+v", check.name, c)
		}
	}
}

// TestFromEnvErrors: each bad or missing value is an error naming its
// variable, and every one is reported at once.
func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes map[string]string
		want    []string // in the error
	}{
		{"no project", map[string]string{EnvProject: ""}, []string{EnvProject, EnvGoogleCloudProject}},
		{"no keys", map[string]string{EnvTokenKeys: ""}, []string{EnvTokenKeys, EnvTokenKeysFile, EnvTokenKeysSecret}},
		{"bad keys", map[string]string{EnvTokenKeys: `{"broken":`}, []string{EnvTokenKeys}},
		{"keys and file", map[string]string{EnvTokenKeysFile: "/ring.json"}, []string{EnvTokenKeys, EnvTokenKeysFile}},
		{"secret and file", map[string]string{EnvTokenKeys: "", EnvTokenKeysSecret: "projects/p/secrets/s", EnvTokenKeysFile: "/ring.json"}, []string{EnvTokenKeysSecret, EnvTokenKeysFile}},
		{"no callback URL", map[string]string{EnvCallbackBaseURL: ""}, []string{EnvCallbackBaseURL}},
		{"relative callback URL", map[string]string{EnvCallbackBaseURL: "callbacks.example.com"}, []string{EnvCallbackBaseURL, "absolute"}},
		{"workers JSON", map[string]string{EnvWorkers: `{"a":`}, []string{EnvWorkers}},
		{"invalid worker", map[string]string{EnvWorkers: `{"Bad Name":{"url":"https://w.example.com","queue":"projects/p1abc/locations/l/queues/q"}}`}, []string{EnvWorkers, "Bad Name"}},
		{"worker rate", map[string]string{EnvWorkers: `{"render":{"url":"https://w.example.com","queue":"projects/servo-p2/locations/l/queues/q","maxDispatchesPerSecond":-5}}`}, []string{EnvWorkers, `worker "render"`, "maxDispatchesPerSecond"}},
		{"worker rate over 100 queues", map[string]string{EnvWorkers: `{"render":{"url":"https://w.example.com","queue":"projects/servo-p2/locations/l/queues/q","maxDispatchesPerSecond":60000}}`}, []string{EnvWorkers, `worker "render"`, "maxDispatchesPerSecond 60000", "120 queues"}},
		{"worker rate not a number", map[string]string{EnvWorkers: `{"render":{"url":"https://w.example.com","queue":"projects/servo-p2/locations/l/queues/q","maxDispatchesPerSecond":"fast"}}`}, []string{EnvWorkers, "maxDispatchesPerSecond"}},
		{"job worker without dispatch URL", map[string]string{EnvWorkers: `{"render":{"job":"projects/servo-p2/locations/l/jobs/render","queue":"projects/servo-p2/locations/l/queues/render"}}`}, []string{EnvJobsDispatchURL, "render"}},
		{"duration", map[string]string{EnvSweepEvery: "15"}, []string{EnvSweepEvery}},
		{"zero duration", map[string]string{EnvStartTimeout: "0s"}, []string{EnvStartTimeout, "positive"}},
		{"negative window", map[string]string{EnvSweepWindow: "-1s"}, []string{EnvSweepWindow}},
		{"integer", map[string]string{EnvMaxBodyBytes: "1MiB"}, []string{EnvMaxBodyBytes}},
		{"shards", map[string]string{EnvDueShards: "0"}, []string{EnvDueShards, "at least 1"}},
		{"redrives", map[string]string{EnvMaxRedrives: "-2"}, []string{EnvMaxRedrives}},
		{"retention under the idempotency window", map[string]string{EnvRetentionDays: "7"}, []string{EnvRetentionDays, "at least 30"}},
		{"bool", map[string]string{EnvSweepEarlyEnd: "sometimes"}, []string{EnvSweepEarlyEnd, "true or false"}},
		{"ratio over 1", map[string]string{EnvTraceSampleRatio: "10"}, []string{EnvTraceSampleRatio, "0 to 1"}},
		{"ratio not a number", map[string]string{EnvTraceSampleRatio: "10%"}, []string{EnvTraceSampleRatio}},
		{"slow", map[string]string{EnvTraceSlow: "0s"}, []string{EnvTraceSlow, "positive"}},
		{"access", map[string]string{EnvAccess: `{"principals":1}`}, []string{EnvAccess}},
		{"access file", map[string]string{EnvAccessFile: "/no/such/access.json"}, []string{EnvAccessFile}},
		{"quotas", map[string]string{EnvQuotas: `[]`}, []string{EnvQuotas}},
		{"quotas file", map[string]string{EnvQuotasFile: "/no/such/quotas.json"}, []string{EnvQuotasFile}},
		{"failpoints", map[string]string{EnvFailpoints: "events.after-commit=explode"}, []string{EnvFailpoints, "explode"}},
		{"all at once", map[string]string{EnvProject: "", EnvDueShards: "x", EnvSweepEvery: "y"}, []string{EnvProject, EnvDueShards, EnvSweepEvery}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEnv(env(tc.changes))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "MDEyMzQ1") {
				t.Errorf("error %q quotes the key ring", err)
			}
		})
	}
}

// TestArmFailpoints: servo dev's path rejects a bad SERVO_FAILPOINTS,
// naming it, and arms nothing when it is unset.
func TestArmFailpoints(t *testing.T) {
	if err := ArmFailpoints(env(map[string]string{EnvFailpoints: "no.such.point=crash"})); err == nil || !strings.Contains(err.Error(), EnvFailpoints) {
		t.Errorf("ArmFailpoints(unknown point) = %v, want an error naming %s", err, EnvFailpoints)
	}
	if err := ArmFailpoints(env(nil)); err != nil {
		t.Errorf("ArmFailpoints(unset) = %v", err)
	}
}

// TestDocumentedVariables: docs/configuration.md's table lists exactly the
// variables FromEnv reads.
func TestDocumentedVariables(t *testing.T) {
	var read []string
	_, _ = FromEnv(func(name string) string {
		if !slices.Contains(read, name) {
			read = append(read, name)
		}
		return ""
	})
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]*)` \\|")
	var documented []string
	for line := range strings.Lines(string(data)) {
		if m := row.FindStringSubmatch(line); m != nil {
			if slices.Contains(documented, m[1]) {
				t.Errorf("docs/configuration.md: %s has two rows", m[1])
			}
			documented = append(documented, m[1])
		}
	}
	for _, v := range read {
		if !slices.Contains(documented, v) {
			t.Errorf("FromEnv reads %s, which docs/configuration.md's table does not list", v)
		}
	}
	for _, v := range documented {
		if !slices.Contains(read, v) {
			t.Errorf("docs/configuration.md's table lists %s, which FromEnv does not read", v)
		}
	}
	if len(documented) < 20 {
		t.Errorf("docs/configuration.md: %d rows found; is the table's format still | `NAME` | …?", len(documented))
	}
}
