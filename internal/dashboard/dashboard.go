package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// CSRFCookie is the cookie that carries the dashboard's anti-forgery token
// (double submit: every form posts it back as the field "csrf").
const CSRFCookie = "servo_csrf"

// ContentSecurityPolicy is the policy of every dashboard answer: only the
// dashboard's own scripts, styles and images, no inline script, no
// framing, forms posting to the dashboard only.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the dashboard.
type Config struct {
	// Store is the task store the pages read (required).
	Store *store.Store
	// API is the control API handler: Cancel and Cancel run are served by
	// it (POST /v1/tasks/{id}/cancel, POST /v1/runs/{runId}/cancel), with
	// its checks and answers (required).
	API http.Handler
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the dashboard's logs; nil means logs.Default().
	Logger *slog.Logger
	// Refresh is how often a live view is re-read while a tab shows it;
	// default (and minimum) 1 s.
	Refresh time.Duration
	// HealthRefresh is how often the health view is re-read; default 5 s.
	HealthRefresh time.Duration
	// MaxViews bounds the distinct live views (a page and its filters)
	// refreshed at once; default 64. Tabs showing the same view share its
	// reads; a live request past the bound is answered 503 and the tab
	// retries later.
	MaxViews int
	// MaxViewsPerCaller bounds the distinct live views one caller (its
	// verified e-mail; an anonymous caller's address) holds open; default
	// MaxViews/4. MaxStreamsPerCaller bounds its open live streams
	// (tabs); default 4 × MaxViewsPerCaller. Past either, 429 with
	// Retry-After: one caller cannot take every view from the others.
	MaxViewsPerCaller   int
	MaxStreamsPerCaller int
	// Traces, when set, gives the task page the task's recorded spans,
	// drawn as a trace timeline (servo dev: its *telemetry.Recorder).
	Traces Traces
	// CloudTraceProject, when set, is the Google Cloud project whose Cloud
	// Trace holds the spans (production): the task page links to the
	// task's trace there, found from its stored trace context.
	CloudTraceProject string
	// Access is the access policy, as the control API's: every page, live
	// stream and action shows or does only what the caller's roles allow,
	// and a caller without an identity gets the sign-in page (unless the
	// policy is open). nil is the open policy.
	Access *auth.Policy
	// Identity checks the caller's identity token, from IAP's signed
	// header (when IAP is configured), the Authorization header or the
	// sign-in cookie (the control API's verifiers).
	Identity auth.Verifiers
}

// Dashboard serves the pages under Prefix.
type Dashboard struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// patterns are the mux's patterns.
	patterns []string
	pages    map[string]*template.Template
	hub      *hub
	health   *healthCache
}

// New returns the dashboard. When cfg.Store or cfg.API is nil, it returns
// an error naming it, which wraps service.ErrMissingDependency.
func New(cfg Config) (*Dashboard, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return build(cfg), nil
}

// check returns the error of a missing dependency.
func (cfg *Config) check() error {
	switch {
	case cfg.Store == nil:
		return service.Missing("dashboard", "Config.Store")
	case cfg.API == nil:
		return service.Missing("dashboard", "Config.API")
	}
	return nil
}

// build builds the dashboard of a checked cfg.
func build(cfg Config) *Dashboard {
	service.Defaults(&cfg.Now, &cfg.Logger)
	cfg.Refresh = max(cfg.Refresh, time.Second)
	if cfg.HealthRefresh <= 0 {
		cfg.HealthRefresh = 5 * time.Second
	}
	cfg.HealthRefresh = max(cfg.HealthRefresh, cfg.Refresh)
	if cfg.MaxViews <= 0 {
		cfg.MaxViews = 64
	}
	if cfg.MaxViewsPerCaller <= 0 {
		cfg.MaxViewsPerCaller = max(1, cfg.MaxViews/4)
	}
	if cfg.MaxStreamsPerCaller <= 0 {
		cfg.MaxStreamsPerCaller = 4 * cfg.MaxViewsPerCaller
	}
	d := &Dashboard{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), pages: parsePages(), health: &healthCache{}}
	d.hub = newHub(cfg.MaxViews, cfg.MaxViewsPerCaller, cfg.MaxStreamsPerCaller, d.log)
	d.routes()
	return d
}

// Mount returns a handler that serves the dashboard under Prefix and
// everything else with api: the control API's handler with its dashboard.
//
// The dashboard is built on its first request: its templates cost a
// millisecond, which the cold starts of the functions that never serve it
// need not pay.
//
// The handler's Routes method lists the dashboard's patterns and the
// API's (when api has a Routes method): the access test of every route
// reads it.
//
// Mount returns New's error of a missing dependency (api or cfg.Store) at
// once.
func Mount(api http.Handler, cfg Config) (http.Handler, error) {
	cfg.API = api
	if err := cfg.check(); err != nil {
		return nil, err
	}
	d := sync.OnceValue(func() *Dashboard { return build(cfg) })
	mux := http.NewServeMux()
	mux.Handle(Prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d().ServeHTTP(w, r) }))
	mux.Handle("/", api)
	return mounted{mux, func() []string {
		out := slices.Clone(d().patterns)
		if rs, ok := api.(interface{ Routes() []string }); ok {
			out = append(out, rs.Routes()...)
		}
		return out
	}}, nil
}

// mounted is Mount's handler.
type mounted struct {
	http.Handler
	routes func() []string
}

// Routes returns the dashboard's and the API's patterns.
func (m mounted) Routes() []string { return m.routes() }

// pageNames are the pages; each is templates/layout.html with its own file.
var pageNames = []string{"tasks", "run", "task", "health", "schedules", "schedule", "error", "signin"}

var funcs = template.FuncMap{
	"lower": func(v any) string { return strings.ToLower(fmt.Sprint(v)) },
	"json":  prettyJSON,
	"ms":    fmtMs,
	"time":  fmtTime,
	"pct":   func(p *int) int { return *p },
	"query": func(k, v string) template.URL { return template.URL(url.Values{k: {v}}.Encode()) },
	"inc":   func(i int) int { return i + 1 },
}

func parsePages() map[string]*template.Template {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		pages[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return pages
}

func (d *Dashboard) routes() {
	m := recordingMux{d.mux, &d.patterns}
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /ui/{$}", d.page)
	m.HandleFunc("GET /ui/runs/{id}", d.page)
	m.HandleFunc("GET /ui/tasks/{id}", d.page)
	m.HandleFunc("GET /ui/health", d.page)
	m.HandleFunc("GET /ui/schedules", d.page)
	m.HandleFunc("GET /ui/schedules/{tenant}/{id}", d.schedulePage)
	m.HandleFunc("GET /ui/live", d.live)
	m.HandleFunc("POST /ui/tasks/{id}/cancel", d.cancelTask)
	m.HandleFunc("POST /ui/runs/{id}/cancel", d.cancelRun)
	m.HandleFunc("POST /ui/schedules/{tenant}/{id}/pause", d.pauseSchedule)
	m.HandleFunc("POST /ui/schedules/{tenant}/{id}/unpause", d.unpauseSchedule)
	m.HandleFunc("GET /ui/signin", func(w http.ResponseWriter, r *http.Request) {
		d.signInPage(w, r, "Sign in to see the tasks your roles allow.")
	})
	m.HandleFunc("POST /ui/signin", d.signIn)
	m.HandleFunc("POST /ui/signout", d.signOut)
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		d.errorPage(w, r, http.StatusNotFound, "No such page: "+r.URL.Path)
	})
}

// recordingMux is a ServeMux that remembers its patterns.
type recordingMux struct {
	*http.ServeMux
	patterns *[]string
}

func (m recordingMux) Handle(pattern string, h http.Handler) {
	*m.patterns = append(*m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m recordingMux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// crossOrigin refuses cross-site requests that change state: it compares
// the browser's Sec-Fetch-Site and Origin headers with the request's host.
var crossOrigin = http.NewCrossOriginProtection()

// ServeHTTP serves the dashboard, with its security headers on every answer.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if r.Method == http.MethodPost {
		if err := crossOrigin.Check(r); err != nil {
			d.errorPage(w, r, http.StatusForbidden, "Cross-site request refused.")
			return
		}
		switch d.validCSRF(r) {
		case formTooLarge:
			if r.URL.Path == Prefix+"signin" {
				d.signInPageStatus(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("That token is too long: paste an identity token of at most %d KiB.", maxSignInToken>>10))
				return
			}
			d.errorPage(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("The form is larger than %d KiB.", maxFormBytes>>10))
			return
		case formForged:
			d.errorPage(w, r, http.StatusForbidden, "The form's anti-forgery token is missing or does not match; reload the page and try again.")
			return
		}
	}
	// The static files, the sign-in page and sign-out need no identity;
	// everything else acts as the caller.
	if !strings.HasPrefix(r.URL.Path, Prefix+"static/") && r.URL.Path != Prefix+"signin" && r.URL.Path != Prefix+"signout" {
		c, err := d.identify(r)
		if err != nil {
			d.dropStaleCookie(w, r)
			d.signInPage(w, r, "Sign in: "+err.Error()+".")
			return
		}
		r = r.WithContext(withCaller(r.Context(), c))
	}
	d.mux.ServeHTTP(w, r)
}

// csrfToken returns the request's anti-forgery token, setting a new cookie
// when it has none.
func (d *Dashboard) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(CSRFCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Value: v, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"})
	return v
}

// maxFormBytes bounds a dashboard form post.
const maxFormBytes = 64 << 10

// Outcomes of validCSRF.
const (
	formValid = iota
	formForged
	formTooLarge
)

// validCSRF checks a POST's form field "csrf" against its cookie: a form
// over maxFormBytes is formTooLarge (said as such, not as a missing
// token), a missing or different token formForged.
func (d *Dashboard) validCSRF(r *http.Request) int {
	r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			return formTooLarge
		}
		return formForged
	}
	c, err := r.Cookie(CSRFCookie)
	if err != nil || len(c.Value) < 32 {
		return formForged
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(c.Value)) != 1 {
		return formForged
	}
	return formValid
}

// layoutData is what every page gets besides its own view.
type layoutData struct {
	Title string
	// Live is the URL of the page's event stream ("" for none).
	Live string
	CSRF string
	Nav  string
	// Flash is a message after an action.
	Flash string
	View  any
	// SignOut: the caller signed in with the sign-in cookie; the header
	// offers to sign out.
	SignOut bool
}

// page serves a page: its view, read now, in the layout.
func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) { d.pageAt(w, r, r.URL.Path) }

// pageAt serves the page of a dashboard path (with the request's query).
func (d *Dashboard) pageAt(w http.ResponseWriter, r *http.Request, path string) {
	v, err := d.resolve(path, r.URL.Query(), callerOf(r.Context()))
	if err != nil {
		d.loadError(w, r, err)
		return
	}
	data, err := v.load(r.Context())
	if err != nil {
		d.loadError(w, r, err)
		return
	}
	ld := layoutData{Title: v.title, Live: Prefix + "live?" + url.Values{"view": {v.path}}.Encode(), CSRF: d.csrfToken(w, r), Nav: v.page,
		Flash: r.URL.Query().Get("flash"), View: data, SignOut: signedInByCookie(r)}
	d.render(w, http.StatusOK, v.page, ld)
}

func (d *Dashboard) render(w http.ResponseWriter, status int, page string, ld layoutData) {
	var buf bytes.Buffer
	if err := d.pages[page].Execute(&buf, ld); err != nil {
		d.log.Error("dashboard: render failed", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment renders a page's live part alone.
func (d *Dashboard) fragment(page string, data any) (string, error) {
	var buf bytes.Buffer
	err := d.pages[page].ExecuteTemplate(&buf, "live", layoutData{View: data})
	return buf.String(), err
}

func (d *Dashboard) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	d.render(w, status, "error", layoutData{Title: http.StatusText(status), View: struct {
		Status  int
		Message string
	}{status, msg}})
}

func (d *Dashboard) loadError(w http.ResponseWriter, r *http.Request, err error) {
	var nv *noViewError
	switch {
	case errors.As(err, &nv):
		d.errorPage(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, errForbidden):
		d.errorPage(w, r, http.StatusForbidden, "Your roles do not let you see this page.")
	case errors.Is(err, store.ErrNotFound):
		d.errorPage(w, r, http.StatusNotFound, "Not found.")
	case errors.Is(err, store.ErrUnavailable), r.Context().Err() != nil:
		w.Header().Set("Retry-After", "2")
		d.errorPage(w, r, http.StatusServiceUnavailable, "The task store is unavailable; reload in a moment.")
	default:
		d.log.ErrorContext(r.Context(), "dashboard: read failed", "path", r.URL.Path, "error", err)
		d.errorPage(w, r, http.StatusInternalServerError, "Internal error.")
	}
}

// cancelTask serves the task page's Cancel: it asks the control API.
func (d *Dashboard) cancelTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !task.ValidID(id, task.TaskIDPrefix) {
		d.errorPage(w, r, http.StatusNotFound, "No such task.")
		return
	}
	d.action(w, r, "/v1/tasks/"+id+"/cancel", Prefix+"tasks/"+id)
}

// cancelRun serves the run page's Cancel run.
func (d *Dashboard) cancelRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !task.ValidID(id, task.RunIDPrefix) {
		d.errorPage(w, r, http.StatusNotFound, "No such run.")
		return
	}
	d.action(w, r, "/v1/runs/"+id+"/cancel", Prefix+"runs/"+id)
}

// action posts a cancel to the control API and redirects back to the page
// with its outcome, or shows the API's error.
func (d *Dashboard) action(w http.ResponseWriter, r *http.Request, apiPath, back string) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	body, _ := json.Marshal(map[string]string{"reason": reason})
	if reason == "" {
		body = nil
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, apiPath, bytes.NewReader(body))
	if err != nil {
		d.errorPage(w, r, http.StatusInternalServerError, "Internal error.")
		return
	}
	req.Header.Set("Content-Type", "application/json")
	// The API checks the caller's role (operator) itself.
	if c := callerOf(r.Context()); c.iap {
		req.Header.Set(auth.IAPHeader, strings.TrimPrefix(c.credential, "Bearer "))
	} else if c.credential != "" {
		req.Header.Set("Authorization", c.credential)
	}
	rec := &recorder{header: http.Header{}}
	d.cfg.API.ServeHTTP(rec, req)
	var answer struct {
		Error, Message, State          string
		Cancelled, Cancelling, Matched int
	}
	_ = json.Unmarshal(rec.body.Bytes(), &answer)
	if rec.status >= 300 {
		msg := answer.Message
		if msg == "" {
			msg = http.StatusText(rec.status)
		}
		d.errorPage(w, r, rec.status, fmt.Sprintf("Cancel refused: %s (%s)", msg, answer.Error))
		return
	}
	flash := "Cancel requested: the task is now " + answer.State + "."
	if strings.Contains(apiPath, "/runs/") {
		flash = fmt.Sprintf("Cancel run: %d of %d tasks cancelled, %d cancelling.", answer.Cancelled, answer.Matched, answer.Cancelling)
	}
	http.Redirect(w, r, back+"?"+url.Values{"flash": {flash}}.Encode(), http.StatusSeeOther)
}

// recorder keeps an in-process answer of the control API.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

// loadTimeout bounds one view's reads.
const loadTimeout = 20 * time.Second

func withLoadTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, loadTimeout)
}
