package openapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/dispatcher"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/openapi"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/telemetry"
)

// object is a JSON object of the document.
type object = map[string]any

// operation is one operation of the document.
type operation struct {
	method, path string
	op           object
}

func (o operation) String() string { return o.method + " " + o.path }

// document returns the served document, parsed, and its operations in
// path and method order.
func document(t *testing.T) (object, []operation) {
	t.Helper()
	var doc object
	if err := json.Unmarshal(openapi.JSON(), &doc); err != nil {
		t.Fatal(err)
	}
	var ops []operation
	for path, item := range doc["paths"].(object) {
		for method, op := range item.(object) {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				ops = append(ops, operation{strings.ToUpper(method), path, op.(object)})
			}
		}
	}
	slices.SortFunc(ops, func(a, b operation) int { return strings.Compare(a.String(), b.String()) })
	return doc, ops
}

// routes are what the handlers serve.
type routes struct {
	// api are the control API's patterns (its Routes), actions the
	// actions of its POST /v1/schedules/{id}:{action}.
	api, actions []string
	// callbacks serves the kinds of callback (callbacks.Kinds).
	callbacks http.Handler
	kinds     []callbacks.Kind
	// claimPattern is the claim's route, served by claim.
	claimPattern string
	claim        http.Handler
}

// servedRoutes builds the handlers as the servers do, without their
// dependencies (routing needs none), with every optional route on.
func servedRoutes(t *testing.T) routes {
	t.Helper()
	st, enq := new(store.Store), new(enqueue.Enqueuer)
	apiHandler, err := dispatcher.NewHandler(dispatcher.Config{
		Store: st, Enqueuer: enq, Traces: http.NotFoundHandler(),
		Events: func(context.Context, events.StreamOptions, func(), func(api.Event) error) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	lister, ok := apiHandler.(interface{ Routes() []string })
	if !ok {
		t.Fatal("the control API handler does not list its routes")
	}
	quiet := slog.New(slog.DiscardHandler)
	cb, err := callbacks.NewHandler(callbacks.Config{Store: st, Keys: new(auth.KeyRing), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := pull.NewHandler(pull.Config{Store: st, Enqueuer: enq, Transport: new(pull.Transport), Logger: quiet,
		Identity: func(*http.Request) (string, error) { return "", pull.ErrUnverified }})
	if err != nil {
		t.Fatal(err)
	}
	return routes{api: lister.Routes(), actions: dispatcher.ScheduleActions(), callbacks: cb, kinds: callbacks.Kinds(),
		claimPattern: pull.ClaimPath, claim: claim}
}

// template matches a path template's parameters.
var template = regexp.MustCompile(`\{[^}]+\}`)

// allowed returns the methods h allows on path: the Allow header of its
// 405 answer to a method nobody serves.
func allowed(h http.Handler, path string) []string {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("PROPFIND", path, nil))
	if w.Code != http.StatusMethodNotAllowed {
		return nil
	}
	return strings.Split(strings.ReplaceAll(w.Header().Get("Allow"), " ", ""), ",")
}

// routeProblems compares the document's operations with the routes
// served: every operation is served, and every route, action, callback
// and the claim is in the document. The control API's method-less
// patterns (405 with Allow) and "/" (404) are not operations.
func routeProblems(ops []operation, r routes) []string {
	var problems []string
	apiMux := http.NewServeMux()
	for _, p := range r.api {
		apiMux.Handle(p, http.NotFoundHandler())
	}
	claimMux := http.NewServeMux()
	claimMux.Handle(r.claimPattern, r.claim)
	hit := map[string]bool{}
	for _, o := range ops {
		path := template.ReplaceAllString(o.path, "p1")
		req := httptest.NewRequest(o.method, path, nil)
		if _, p := apiMux.Handler(req); strings.Contains(p, " ") {
			hit[p] = true
			if _, action, ok := strings.Cut(o.path, "}:"); ok {
				hit["action "+action] = true
				if !slices.Contains(r.actions, action) {
					problems = append(problems, fmt.Sprintf("%s is in docs/openapi.yaml, but %s serves no action %q (dispatcher.ScheduleActions)", o, p, action))
				}
			}
			continue
		}
		if _, kind, ok := callbacks.SplitPath(path); ok && slices.Contains(r.kinds, kind) && slices.Contains(allowed(r.callbacks, path), o.method) {
			hit["callback "+string(kind)] = true
			continue
		}
		if _, p := claimMux.Handler(req); p == r.claimPattern && slices.Contains(allowed(claimMux, path), o.method) {
			hit["claim"] = true
			continue
		}
		problems = append(problems, fmt.Sprintf("%s is in docs/openapi.yaml, but no handler serves it", o))
	}
	for _, p := range r.api {
		if strings.Contains(p, " ") && !hit[p] {
			problems = append(problems, fmt.Sprintf("the control API serves %s, which is not in docs/openapi.yaml", p))
		}
	}
	for _, a := range r.actions {
		if !hit["action "+a] {
			problems = append(problems, fmt.Sprintf("the control API serves POST /v1/schedules/{id}:%s, which is not in docs/openapi.yaml", a))
		}
	}
	for _, k := range r.kinds {
		if !hit["callback "+string(k)] {
			problems = append(problems, fmt.Sprintf("the callbacks serve POST %s{taskId}/%s, which is not in docs/openapi.yaml", callbacks.PathPrefix, k))
		}
	}
	if !hit["claim"] {
		problems = append(problems, fmt.Sprintf("the claim serves POST %s, which is not in docs/openapi.yaml", r.claimPattern))
	}
	return problems
}

// Every route of the control API, the callbacks and the claim is in the
// document, and everything the document describes is served.
func TestRoutesAreDocumented(t *testing.T) {
	_, ops := document(t)
	r := servedRoutes(t)
	if len(r.api) < 20 || len(r.kinds) != 3 || len(r.actions) != 2 {
		t.Fatalf("found %d API patterns, %d callbacks and %d schedule actions: the enumeration is broken", len(r.api), len(r.kinds), len(r.actions))
	}
	for _, p := range routeProblems(ops, r) {
		t.Error(p)
	}
}

// The route check catches a route missing from the document, and an
// operation no handler serves.
func TestRouteProblemsFindsDrift(t *testing.T) {
	_, ops := document(t)
	for _, c := range []struct {
		name   string
		change func(*routes)
		want   string
	}{
		{"an undocumented route", func(r *routes) { r.api = append(r.api, "GET /v1/tasks/{id}/dummy") },
			"the control API serves GET /v1/tasks/{id}/dummy, which is not in docs/openapi.yaml"},
		{"a route no longer served", func(r *routes) {
			r.api = slices.DeleteFunc(r.api, func(p string) bool { return p == "GET /v1/health" })
		}, "GET /v1/health is in docs/openapi.yaml, but no handler serves it"},
		{"an undocumented schedule action", func(r *routes) { r.actions = append(r.actions, "pause") },
			"POST /v1/schedules/{id}:pause, which is not in docs/openapi.yaml"},
		{"an undocumented callback", func(r *routes) { r.kinds = append(r.kinds, "checkpoint") },
			"POST /v1/tasks/{taskId}/checkpoint, which is not in docs/openapi.yaml"},
		{"a moved claim", func(r *routes) { r.claimPattern = "/v2/pools/{pool}/claim" },
			"POST /v1/pools/{pool}/claim is in docs/openapi.yaml, but no handler serves it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := servedRoutes(t)
			c.change(&r)
			got := routeProblems(ops, r)
			if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("got %q, want a problem with %q", got, c.want)
			}
		})
	}
}

// The document serves itself: GET /v1/openapi.json of the control API.
func TestServed(t *testing.T) {
	h, err := dispatcher.NewHandler(dispatcher.Config{Store: new(store.Store), Enqueuer: new(enqueue.Enqueuer)})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	body, _ := io.ReadAll(w.Result().Body)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || string(body) != string(openapi.JSON()) {
		t.Fatalf("GET /v1/openapi.json: %d %s, %d bytes, want 200 application/json and the document", w.Code, w.Header().Get("Content-Type"), len(body))
	}
	req := httptest.NewRequest("GET", "/v1/openapi.json", nil)
	req.Header.Set("If-None-Match", w.Header().Get("ETag"))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusNotModified {
		t.Errorf("GET /v1/openapi.json with its ETag: %d, want 304", w.Code)
	}
}

// types are the bodies of one operation: its request's (nil: none), its
// successful answers' by status (nil: not a JSON body of an api type) and
// its error answers'.
type types struct {
	req  any
	ok   map[string]any
	fail any
}

// bodies are every operation's bodies, as the handlers write them.
var bodies = map[string]types{
	"POST /v1/tasks":                    {api.SubmitRequest{}, map[string]any{"200": api.SubmitResponse{}, "201": api.SubmitResponse{}}, api.Error{}},
	"GET /v1/tasks":                     {nil, map[string]any{"200": api.ListResponse{}}, api.Error{}},
	"POST /v1/tasks:batch":              {api.BatchRequest{}, map[string]any{"200": api.BatchResponse{}, "201": api.BatchResponse{}, "207": api.BatchResponse{}}, api.Error{}},
	"GET /v1/tasks:counts":              {nil, map[string]any{"200": api.CountsResponse{}}, api.Error{}},
	"GET /v1/tasks/{id}":                {nil, map[string]any{"200": api.Task{}}, api.Error{}},
	"POST /v1/tasks/{id}/cancel":        {api.CancelRequest{}, map[string]any{"200": api.Task{}}, api.Error{}},
	"GET /v1/tasks/{id}/trace":          {nil, map[string]any{"200": telemetry.TaskTrace{}}, api.Error{}},
	"GET /v1/tasks/{id}/events":         {nil, map[string]any{"200": api.EventsResponse{}}, api.Error{}},
	"GET /v1/events":                    {nil, map[string]any{"200": nil}, api.Error{}},
	"GET /v1/runs":                      {nil, map[string]any{"200": api.RunsResponse{}}, api.Error{}},
	"GET /v1/runs/{runId}/events":       {nil, map[string]any{"200": api.EventsResponse{}}, api.Error{}},
	"POST /v1/runs/{runId}/cancel":      {api.CancelRequest{}, map[string]any{"200": api.RunCancelResponse{}}, api.Error{}},
	"POST /v1/schedules":                {api.ScheduleRequest{}, map[string]any{"201": api.Schedule{}}, api.Error{}},
	"GET /v1/schedules":                 {nil, map[string]any{"200": api.SchedulesResponse{}}, api.Error{}},
	"GET /v1/schedules/{id}":            {nil, map[string]any{"200": api.Schedule{}}, api.Error{}},
	"PATCH /v1/schedules/{id}":          {api.SchedulePatch{}, map[string]any{"200": api.Schedule{}}, api.Error{}},
	"DELETE /v1/schedules/{id}":         {nil, map[string]any{"204": nil}, api.Error{}},
	"POST /v1/schedules/{id}:trigger":   {api.TriggerRequest{}, map[string]any{"200": api.FireResponse{}}, api.Error{}},
	"POST /v1/schedules/{id}:backfill":  {api.BackfillRequest{}, map[string]any{"200": api.FireResponse{}}, api.Error{}},
	"GET /v1/health":                    {nil, map[string]any{"200": api.HealthResponse{}}, api.Error{}},
	"GET /v1/tenants/{tenant}/usage":    {nil, map[string]any{"200": api.UsageResponse{}}, api.Error{}},
	"GET /v1/openapi.json":              {nil, map[string]any{"200": nil, "304": nil}, api.Error{}},
	"POST /v1/tasks/{taskId}/started":   {api.StartedRequest{}, map[string]any{"200": api.CallbackResponse{}}, api.CallbackResponse{}},
	"POST /v1/tasks/{taskId}/heartbeat": {api.HeartbeatRequest{}, map[string]any{"200": api.CallbackResponse{}}, api.CallbackResponse{}},
	"POST /v1/tasks/{taskId}/completed": {api.CompletedRequest{}, map[string]any{"200": api.CallbackResponse{}}, api.CallbackResponse{}},
	"POST /v1/pools/{pool}/claim":       {api.ClaimRequest{}, map[string]any{"200": api.ClaimResponse{}}, api.ClaimResponse{}},
}

// jsonField is one member of a Go struct's JSON.
type jsonField struct {
	name      string
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists t's JSON members as encoding/json writes them, those
// of embedded structs inlined.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name, f.Type, slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	return out
}

var (
	rawMessage = reflect.TypeFor[json.RawMessage]()
	timeType   = reflect.TypeFor[time.Time]()
)

// checker holds the document's schemas to Go types.
type checker struct {
	schemas  object
	problems []string
	// checked are the schema and type pairs checked; reached the
	// schemas and the struct types met.
	checked map[string]bool
	reached map[string]bool
	types   map[reflect.Type]bool
}

func newChecker(doc object) *checker {
	return &checker{schemas: doc["components"].(object)["schemas"].(object),
		checked: map[string]bool{}, reached: map[string]bool{}, types: map[reflect.Type]bool{}}
}

func (c *checker) errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// refName is the schema a $ref of s names ("" when none).
func refName(s object) string {
	ref, _ := s["$ref"].(string)
	return strings.TrimPrefix(ref, "#/components/schemas/")
}

// describes reports whether schema name describes Go type t: it is named
// after it, or it is a variant of it (x-go-type).
func (c *checker) describes(name string, t reflect.Type) bool {
	s, _ := c.schemas[name].(object)
	return name == t.Name() || (s != nil && s["x-go-type"] == t.Name())
}

// object checks that the schema name has exactly t's JSON fields as
// properties, of their types, and requires exactly those always present
// (a variant, x-go-type, may require fewer): a field without omitempty
// is required, one with omitempty is not.
func (c *checker) object(name string, t reflect.Type) {
	c.reached[name] = true
	c.types[t] = true
	key := name + " " + t.String()
	if c.checked[key] {
		return
	}
	c.checked[key] = true
	s, ok := c.schemas[name].(object)
	if !ok {
		c.errorf("%s has no schema %s in docs/openapi.yaml", t.String(), name)
		return
	}
	variant := s["x-go-type"] != nil
	if s["type"] != "object" {
		c.errorf("schema %s: want type object (%s), got %v", name, t.String(), s["type"])
	}
	props, _ := s["properties"].(object)
	required := map[string]bool{}
	reqs, _ := s["required"].([]any)
	for _, r := range reqs {
		required[r.(string)] = true
	}
	fields := map[string]bool{}
	for _, f := range jsonFields(t) {
		fields[f.name] = true
		p, ok := props[f.name].(object)
		if !ok {
			c.errorf("%s field %q is not a property of schema %s in docs/openapi.yaml", t.String(), f.name, name)
			continue
		}
		switch {
		case required[f.name] && f.omitempty:
			c.errorf("schema %s requires %q, but %s's field is omitempty", name, f.name, t.String())
		case !required[f.name] && !f.omitempty && !variant:
			c.errorf("schema %s does not require %q, but %s always has it (no omitempty)", name, f.name, t.String())
		}
		c.value(name+"."+f.name, p, f.typ, !f.omitempty)
	}
	for p := range props {
		if !fields[p] {
			c.errorf("schema %s has property %q, which %s does not have", name, p, t.String())
		}
	}
	for r := range required {
		if !fields[r] {
			c.errorf("schema %s requires %q, which %s does not have", name, r, t.String())
		}
	}
}

// value checks that schema s, of where, describes a JSON value of Go type
// t; present says that the value is always written (a nil pointer as
// null).
func (c *checker) value(where string, s object, t reflect.Type, present bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
		if present {
			inner := nullable(s)
			if inner == nil {
				c.errorf("%s may be null (%s without omitempty): want oneOf [the value, {type: 'null'}]", where, t.String())
				return
			}
			s = inner
		}
	}
	wantType := func(typ string) {
		if s["type"] != typ {
			c.errorf("%s is %s in Go: want type %s, got %v", where, t.String(), typ, s["type"])
		}
	}
	switch {
	case t == rawMessage:
		if s["type"] != nil || s["$ref"] != nil {
			c.errorf("%s is any JSON (json.RawMessage): want no type and no $ref", where)
		}
	case t == timeType:
		wantType("string")
		if s["format"] != "date-time" {
			c.errorf("%s is a time: want format date-time, got %v", where, s["format"])
		}
	case t.Kind() == reflect.Struct:
		ref := refName(s)
		if ref == "" || !c.describes(ref, t) {
			c.errorf("%s is %s: want a $ref to its schema, got %q", where, t.String(), ref)
			return
		}
		c.object(ref, t)
	case t.Kind() == reflect.String && t.Name() != "string":
		// A named string type: its schema, whose values TestEnums checks.
		if ref := refName(s); ref != t.Name() {
			c.errorf("%s is %s: want a $ref to schema %s, got %q", where, t.String(), t.Name(), ref)
			return
		}
		c.reached[t.Name()] = true
	case t.Kind() == reflect.String:
		if ref := refName(s); ref != "" {
			target, _ := c.schemas[ref].(object)
			if target == nil || target["type"] != "string" {
				c.errorf("%s is a string: its $ref %s must be a string schema", where, ref)
			}
			c.reached[ref] = true
			return
		}
		wantType("string")
	case t.Kind() == reflect.Bool:
		wantType("boolean")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		wantType("integer")
		if (t.Kind() == reflect.Int64 || t.Kind() == reflect.Uint64) && s["format"] != "int64" {
			c.errorf("%s is %s: want format int64, got %v", where, t.String(), s["format"])
		}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		wantType("number")
	case t.Kind() == reflect.Slice:
		wantType("array")
		items, _ := s["items"].(object)
		c.value(where+"[]", items, t.Elem(), false)
	case t.Kind() == reflect.Map:
		wantType("object")
		values, _ := s["additionalProperties"].(object)
		c.value(where+"{}", values, t.Elem(), false)
		if k := t.Key(); k.Name() != "string" {
			names, _ := s["propertyNames"].(object)
			c.value(where+" keys", names, k, false)
		}
	default:
		c.errorf("%s: the check does not know Go type %s", where, t.String())
	}
}

// nullable returns the value schema of s = oneOf (or anyOf) [value,
// {type: null}], or nil.
func nullable(s object) object {
	for _, k := range []string{"oneOf", "anyOf"} {
		alts, _ := s[k].([]any)
		if len(alts) != 2 {
			continue
		}
		for i, a := range alts {
			if a.(object)["type"] == "null" {
				return alts[1-i].(object)
			}
		}
	}
	return nil
}

// refs are the schemas a body's schema names: its $ref, or its anyOf's
// and oneOf's.
func refs(s object) []string {
	if r := refName(s); r != "" {
		return []string{r}
	}
	var out []string
	for _, k := range []string{"oneOf", "anyOf"} {
		alts, _ := s[k].([]any)
		for _, a := range alts {
			if r := refName(a.(object)); r != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// body checks that the JSON body of content (a request's or a response's
// content map) is a t.
func (c *checker) body(where string, content any, t reflect.Type) {
	media, _ := content.(object)
	jsonBody, _ := media["application/json"].(object)
	if jsonBody == nil {
		c.errorf("%s: want an application/json body (%s)", where, t.String())
		return
	}
	schema, _ := jsonBody["schema"].(object)
	for _, r := range refs(schema) {
		if c.describes(r, t) {
			c.object(r, t)
			return
		}
	}
	c.errorf("%s: its schema names %q, none of which is %s's", where, refs(schema), t.String())
}

// resolve follows a response's $ref to components.responses.
func resolve(doc object, r object) object {
	if ref, ok := r["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/responses/")
		r, _ = doc["components"].(object)["responses"].(object)[name].(object)
	}
	return r
}

// operationProblems checks every operation's bodies against the Go types
// the handlers read and write (bodies), and every schema against its Go
// type, following nested structs, slices and maps.
func operationProblems(doc object, ops []operation, c *checker) []string {
	var problems []string
	ids := map[string]string{}
	for _, o := range ops {
		id, _ := o.op["operationId"].(string)
		if id == "" || ids[id] != "" {
			problems = append(problems, fmt.Sprintf("%s: want an operationId of its own, got %q (also %s)", o, id, ids[id]))
		}
		ids[id] = o.String()
		b, ok := bodies[o.String()]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is not in this test's bodies: say which types it reads and writes", o))
			continue
		}
		rb, _ := o.op["requestBody"].(object)
		switch {
		case b.req == nil && rb != nil:
			problems = append(problems, fmt.Sprintf("%s: the document has a request body, the handler reads none", o))
		case b.req != nil && rb == nil:
			problems = append(problems, fmt.Sprintf("%s: the handler reads a %T, the document has no request body", o, b.req))
		case b.req != nil:
			c.body(o.String()+" request", rb["content"], reflect.TypeOf(b.req))
		}
		responses, _ := o.op["responses"].(object)
		for status, r := range responses {
			r := resolve(doc, r.(object))
			where := o.String() + " " + status
			if status < "400" {
				t, ok := b.ok[status]
				switch {
				case !ok:
					problems = append(problems, fmt.Sprintf("%s: the handler answers no %s", o, status))
				case t != nil:
					c.body(where, r["content"], reflect.TypeOf(t))
				}
				continue
			}
			c.body(where, r["content"], reflect.TypeOf(b.fail))
		}
		for status := range b.ok {
			if responses[status] == nil {
				problems = append(problems, fmt.Sprintf("%s: the handler answers %s, which the document does not list", o, status))
			}
		}
	}
	return append(problems, c.problems...)
}

// apiDecls parses package api: its exported struct types, and its
// constants by type name ("" for untyped) with their values.
func apiDecls(t *testing.T) (structs []string, consts map[string]map[string]string) {
	t.Helper()
	files, err := filepath.Glob("../../api/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("package api: %v", err)
	}
	consts = map[string]map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if _, isStruct := s.Type.(*ast.StructType); isStruct && s.Name.IsExported() {
						structs = append(structs, s.Name.Name)
					}
				case *ast.ValueSpec:
					if g.Tok != token.CONST {
						continue
					}
					typ := ""
					if id, ok := s.Type.(*ast.Ident); ok {
						typ = id.Name
					}
					for i, n := range s.Names {
						if i >= len(s.Values) {
							break
						}
						lit, ok := s.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, _ := strconv.Unquote(lit.Value)
						if consts[typ] == nil {
							consts[typ] = map[string]string{}
						}
						consts[typ][n.Name] = v
					}
				}
			}
		}
	}
	return structs, consts
}

// notDescribed are the api package's struct types that are no body of
// these routes.
var notDescribed = map[string]string{
	"DeadLetter":  "the dead-letter topic's message (docs/contract.md §8.4)",
	"Timing":      "a task's timers inside Servo; the API shows them as the task's fields",
	"SweepStatus": "embedded in SweeperHealth, whose schema has its fields",
}

// Every operation's bodies are their Go types, every field of every
// request and response type (nested ones included) is a property of its
// schema and every property a field, and every schema and every api type
// is accounted for.
func TestSchemasMatchTypes(t *testing.T) {
	doc, ops := document(t)
	c := newChecker(doc)
	for _, p := range operationProblems(doc, ops, c) {
		t.Error(p)
	}
	t.Logf("checked %d schemas against %d Go types", len(c.checked), len(c.types))
	for name := range c.schemas {
		if !c.reached[name] {
			t.Errorf("schema %s describes no body of an operation, nor a part of one", name)
		}
	}
	met := map[string]bool{}
	for typ := range c.types {
		if typ.PkgPath() == reflect.TypeFor[api.Task]().PkgPath() {
			met[typ.Name()] = true
		}
	}
	structs, _ := apiDecls(t)
	for _, name := range structs {
		if !met[name] && notDescribed[name] == "" {
			t.Errorf("api.%s is no body of an operation in docs/openapi.yaml: describe it, or say in notDescribed why not", name)
		}
	}
	for o := range bodies {
		if !slices.ContainsFunc(ops, func(op operation) bool { return op.String() == o }) {
			t.Errorf("bodies lists %s, which is not in docs/openapi.yaml", o)
		}
	}
}

// The schema check catches a field missing from the document, a
// property the type does not have, a required field the type omits and
// a property of the wrong type.
func TestSchemaCheckFindsDrift(t *testing.T) {
	doc, _ := document(t)
	type withDummy struct {
		api.Task
		Dummy string `json:"dummy"`
	}
	type partialRun struct {
		RunID string `json:"runId"`
	}
	type omits struct {
		TaskID  string    `json:"taskId,omitempty"`
		RunID   string    `json:"runId"`
		Attempt int       `json:"attempt"`
		State   api.State `json:"state"`
	}
	type mistyped struct {
		TaskID  string    `json:"taskId"`
		RunID   string    `json:"runId"`
		Attempt string    `json:"attempt"`
		State   api.State `json:"state"`
	}
	for _, c := range []struct {
		schema string
		typ    reflect.Type
		want   string
	}{
		{"Task", reflect.TypeFor[withDummy](), `field "dummy" is not a property of schema Task`},
		{"Run", reflect.TypeFor[partialRun](), `schema Run has property "tenantId", which openapi_test.partialRun does not have`},
		{"SubmitResponse", reflect.TypeFor[omits](), `schema SubmitResponse requires "taskId", but openapi_test.omits's field is omitempty`},
		{"SubmitResponse", reflect.TypeFor[mistyped](), `SubmitResponse.attempt is string in Go: want type string, got integer`},
	} {
		t.Run(c.typ.Name(), func(t *testing.T) {
			ch := newChecker(doc)
			ch.object(c.schema, c.typ)
			if !slices.ContainsFunc(ch.problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("got %q, want a problem with %q", ch.problems, c.want)
			}
		})
	}
}

// The enumerations are the api package's constants: every error code
// (ErrorCode), state, outcome, category, disposition, overlap policy and
// fire kind and outcome.
func TestEnums(t *testing.T) {
	doc, _ := document(t)
	schemas := doc["components"].(object)["schemas"].(object)
	_, consts := apiDecls(t)
	byPrefix := func(prefix, not string) map[string]string {
		out := map[string]string{}
		for name, v := range consts[""] {
			if strings.HasPrefix(name, prefix) && (not == "" || !strings.HasPrefix(name, not)) {
				out[name] = v
			}
		}
		return out
	}
	codes := byPrefix("Code", "")
	// Internal to the jobs endpoint, never answered (docs/contract.md §13).
	delete(codes, "CodeExecutionConflict")
	for schema, want := range map[string]map[string]string{
		"ErrorCode":   codes,
		"State":       consts["State"],
		"Outcome":     consts["Outcome"],
		"Category":    consts["Category"],
		"Disposition": consts["Disposition"],
		"Overlap":     byPrefix("Overlap", ""),
		"FireKind":    byPrefix("FireBy", ""),
		"FireOutcome": byPrefix("Fire", "FireBy"),
	} {
		if len(want) < 3 {
			t.Fatalf("%s: found %d constants: the parse is broken", schema, len(want))
		}
		s, _ := schemas[schema].(object)
		var got []string
		enum, _ := s["enum"].([]any)
		for _, v := range enum {
			got = append(got, v.(string))
		}
		for name, v := range want {
			if !slices.Contains(got, v) {
				t.Errorf("api.%s (%q) is not in schema %s's enum in docs/openapi.yaml", name, v, schema)
			}
		}
		for _, v := range got {
			if !slices.Contains(slices.Collect(maps.Values(want)), v) {
				t.Errorf("schema %s's enum has %q, which is no constant of package api", schema, v)
			}
		}
	}
}
