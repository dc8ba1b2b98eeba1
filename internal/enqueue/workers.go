package enqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
)

// WorkersEnv is the variable that holds the worker configuration as JSON
// (read by package config; ParseWorkers names it in errors):
//
//	{"render": {"url": "https://render-abc.a.run.app/", "queue": "projects/P/locations/L/queues/render",
//	            "serviceAccount": "tasks-invoker@P.iam.gserviceaccount.com",
//	            "maxDispatchesPerSecond": 1500}}
const WorkersEnv = "SERVO_WORKERS"

// ErrUnknownWorker: the worker name is not configured.
var ErrUnknownWorker = errors.New("unknown worker")

// Worker is where tasks for a named worker go. Callers name workers; they
// never supply URLs (no SSRF).
type Worker struct {
	// URL is the worker's HTTPS endpoint (http:// only on loopback, locally).
	URL string `json:"url"`
	// Queue is the Cloud Tasks queue: projects/P/locations/L/queues/Q.
	Queue string `json:"queue"`
	// ServiceAccount is the account whose OIDC token Cloud Tasks attaches;
	// empty sends no token (local stack).
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// Audience of the OIDC token; defaults to URL.
	Audience string `json:"audience,omitempty"`
	// Pull makes the worker a pull pool (package pull): no URL and no
	// queue; its attempts go to the pool's Pub/Sub topic and its workers
	// claim them with POST /v1/pools/{name}/claim.
	Pull bool `json:"pull,omitempty"`
	// ServiceAccounts are the identities allowed to claim from a pull pool
	// (required in production; locally, empty allows any caller).
	ServiceAccounts []string `json:"serviceAccounts,omitempty"`
	// Tenants, when set, binds the worker (a pull pool, typically) to
	// these tenants: a task of any other tenant is refused at submit (403
	// on the field worker), so the pool's members only ever claim those
	// tenants' tasks. Unset, the worker serves every tenant that submits
	// to it, and its members act for all of them.
	Tenants []string `json:"tenants,omitempty"`
	// Job names the Cloud Run Job that runs the worker's attempts
	// (projects/P/locations/L/jobs/J). A job worker has no URL: its Cloud
	// Tasks call Servo's jobs dispatch endpoint, which runs the job (see
	// package jobs).
	Job string `json:"job,omitempty"`
	// TimeoutSeconds is how long the endpoint Cloud Tasks calls (the
	// worker's Cloud Run service, or for a job worker the jobs dispatch
	// function) lets a request run; 0 means unknown. A Cloud Task's
	// dispatch deadline never exceeds it, so Cloud Tasks does not wait
	// for a request the service has already cut off, nor give up on one
	// still running (DispatchDeadline).
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// MaxDispatchesPerSecond is the worker's declared peak dispatch rate;
	// 0 means not declared. Above MaxQueueDispatchesPerSecond the worker
	// has several queues, Queue and its siblings (Queues, QueueName), and
	// each attempt goes to one of them (QueueIndex).
	MaxDispatchesPerSecond float64 `json:"maxDispatchesPerSecond,omitempty"`
}

// Workers maps worker names to their configuration.
type Workers map[string]Worker

// The names' grammars. Lengths are checked apart from the expressions: a
// bounded repetition such as {4,61} compiles to a large program, which
// every process linking the package would pay at init (the functions' cold
// start among them).
var (
	// queueRE: projects/PROJECT/locations/LOCATION/queues/QUEUE, PROJECT 6
	// to 63 characters, QUEUE 1 to 100.
	queueRE = boundedRE{regexp.MustCompile(`^projects/([a-z][a-z0-9-]*[a-z0-9])/locations/[a-z0-9-]+/queues/([A-Za-z0-9-]+)$`), []int{6, 63, 1, 100}}
	// nameRE: a worker's name.
	nameRE = boundedRE{regexp.MustCompile(`^([a-z][a-z0-9-_]*)$`), []int{1, 63}}
	// jobRE matches a Cloud Run Job's full name, JOB at most 63 characters.
	jobRE = boundedRE{regexp.MustCompile(`^projects/([a-z][a-z0-9-]*[a-z0-9])/locations/[a-z0-9-]+/jobs/([a-z](?:[a-z0-9-]*[a-z0-9])?)$`), []int{6, 63, 1, 63}}
)

// namePattern is nameRE as one expression, for error messages.
const namePattern = `^[a-z][a-z0-9-_]{0,62}$`

// boundedRE is an expression whose submatches have length bounds: min and
// max of the first, then of the second, ….
type boundedRE struct {
	re     *regexp.Regexp
	bounds []int
}

// MatchString reports whether s matches, its submatches within bounds.
func (b boundedRE) MatchString(s string) bool {
	m := b.re.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	for i := 0; i+1 < len(b.bounds); i += 2 {
		if n := len(m[1+i/2]); n < b.bounds[i] || n > b.bounds[i+1] {
			return false
		}
	}
	return true
}

// ParseWorkers parses and validates the JSON worker configuration. With
// allowLoopbackHTTP (the local stack), http:// URLs on loopback are accepted.
func ParseWorkers(data []byte, allowLoopbackHTTP bool) (Workers, error) {
	var ws Workers
	if err := json.Unmarshal(data, &ws); err != nil {
		return nil, fmt.Errorf("%s: %w", WorkersEnv, err)
	}
	return ws, ws.Validate(allowLoopbackHTTP)
}

// Validate checks every worker.
func (ws Workers) Validate(allowLoopbackHTTP bool) error {
	for _, name := range ws.Names() {
		w := ws[name]
		if !nameRE.MatchString(name) {
			return fmt.Errorf("worker %q: name must match %s", name, namePattern)
		}
		for _, t := range w.Tenants {
			if t == "" || len(t) > 128 || t == "*" {
				return fmt.Errorf("worker %q: tenants: %q is not a tenant id (1-128 bytes; list the tenants, or leave tenants out for every tenant)", name, t)
			}
		}
		if w.Pull || len(w.ServiceAccounts) > 0 {
			if err := w.validatePull(allowLoopbackHTTP); err != nil {
				return fmt.Errorf("worker %q: %w", name, err)
			}
			continue
		}
		if w.TimeoutSeconds < 0 {
			return fmt.Errorf("worker %q: timeoutSeconds must not be negative, got %d", name, w.TimeoutSeconds)
		}
		if err := checkTarget(w, allowLoopbackHTTP); err != nil {
			return fmt.Errorf("worker %q: %w", name, err)
		}
		if !queueRE.MatchString(w.Queue) {
			return fmt.Errorf("worker %q: queue %q must be projects/PROJECT/locations/LOCATION/queues/QUEUE", name, w.Queue)
		}
		if err := w.validateRate(); err != nil {
			return fmt.Errorf("worker %q: %w", name, err)
		}
	}
	return nil
}

// Names returns the worker names, sorted.
func (ws Workers) Names() []string {
	out := make([]string, 0, len(ws))
	for n := range ws {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the named worker or ErrUnknownWorker.
func (ws Workers) Lookup(name string) (Worker, error) {
	w, ok := ws[name]
	if !ok {
		return Worker{}, fmt.Errorf("%w %q", ErrUnknownWorker, name)
	}
	return w, nil
}

// checkTarget checks where the worker's attempts go: a URL, or a Cloud Run
// Job (then no URL).
func checkTarget(w Worker, allowLoopbackHTTP bool) error {
	if w.Job == "" {
		return checkURL(w.URL, allowLoopbackHTTP)
	}
	if w.URL != "" {
		return fmt.Errorf("a job worker has no url (its Cloud Tasks call Servo's jobs dispatch endpoint), got url %q", w.URL)
	}
	if !jobRE.MatchString(w.Job) {
		return fmt.Errorf("job %q must be projects/PROJECT/locations/LOCATION/jobs/JOB", w.Job)
	}
	return nil
}

func checkURL(raw string, allowLoopbackHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("url %q is not an absolute URL", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if allowLoopbackHTTP && isLoopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("url %q must be https (http is accepted only on loopback in the local stack)", raw)
	}
	return fmt.Errorf("url %q must be https", raw)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serves reports whether the worker takes tenant's tasks: every tenant's
// unless it is bound to some (Tenants).
func (w Worker) Serves(tenant string) bool {
	return len(w.Tenants) == 0 || slices.Contains(w.Tenants, tenant)
}
