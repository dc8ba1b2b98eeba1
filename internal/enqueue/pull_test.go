package enqueue

import (
	"strings"
	"testing"
)

func TestParsePullPools(t *testing.T) {
	cases := []struct {
		name     string
		json     string
		loopback bool
		wantErr  string
	}{
		{"pool with accounts", `{"gpu":{"pull":true,"serviceAccounts":["gpu-box@p.iam.gserviceaccount.com"]}}`, false, ""},
		{"pool without accounts locally", `{"gpu":{"pull":true}}`, true, ""},
		{"pool without accounts in production", `{"gpu":{"pull":true}}`, false, "needs serviceAccounts"},
		{"pool with a url", `{"gpu":{"pull":true,"url":"https://gpu.example/","serviceAccounts":["a@p.iam.gserviceaccount.com"]}}`, false, "no url and no queue"},
		{"pool with a queue", `{"gpu":{"pull":true,"queue":"projects/my-project/locations/l/queues/q"}}`, true, "no url and no queue"},
		{"pool with an OIDC account", `{"gpu":{"pull":true,"serviceAccount":"a@p.iam.gserviceaccount.com"}}`, true, "no serviceAccount"},
		{"bad account", `{"gpu":{"pull":true,"serviceAccounts":["not an address"]}}`, false, "not an e-mail"},
		{"accounts without pull", `{"gpu":{"serviceAccounts":["a@p.iam.gserviceaccount.com"]}}`, false, "pull: true"},
		{"neither url nor pull", `{"gpu":{}}`, false, "absolute URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, err := ParseWorkers([]byte(c.json), c.loopback)
			if c.wantErr == "" {
				if err != nil || !ws["gpu"].Pull {
					t.Fatalf("got %v, %v", ws, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want an error about %q", err, c.wantErr)
			}
		})
	}
}
