package telemetry

import (
	"net/http"
	"strings"
	"time"
)

// APIMetrics wraps the control API's handler: every answer is counted by
// method, route and status (servo.api.requests) and timed
// (servo.api.duration).
//
// The handler returned lists h's routes (a Routes method) when h does.
func APIMetrics(h http.Handler) http.Handler {
	m := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		RecordAPI(r.Context(), apiMethod(r.Method), APIRoute(r.URL.Path), sw.status, time.Since(start))
	})
	if rs, ok := h.(routeLister); ok {
		return meteredRoutes{m, rs}
	}
	return m
}

// routeLister is a handler that lists the patterns it serves.
type routeLister interface{ Routes() []string }

type meteredRoutes struct {
	http.HandlerFunc
	routes routeLister
}

func (m meteredRoutes) Routes() []string { return m.routes.Routes() }

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush lets a streaming answer (the dashboard's) flush through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap serves http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func apiMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "_OTHER"
}

// APIRoute is the bounded route label of a control API path: ids become
// {id}, {runId} or {tenant}, the dashboard is "/ui/", and anything else
// unknown is "other", so that no request can make a series of its own.
func APIRoute(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case strings.HasPrefix(path, "/ui/") || path == "/ui":
		return "/ui/"
	case len(seg) < 2 || seg[0] != "v1":
		return "other"
	}
	switch seg[1] {
	case "tasks", "tasks:batch", "tasks:counts", "health", "runs":
	case "tenants":
		if len(seg) == 4 && seg[3] == "usage" {
			return "/v1/tenants/{tenant}/usage"
		}
		return "other"
	default:
		return "other"
	}
	switch {
	case len(seg) == 2:
		return "/v1/" + seg[1]
	case seg[1] == "tasks" && len(seg) == 3:
		return "/v1/tasks/{id}"
	case seg[1] == "tasks" && len(seg) == 4 && (seg[3] == "cancel" || seg[3] == "events" || seg[3] == "trace"):
		return "/v1/tasks/{id}/" + seg[3]
	case seg[1] == "runs" && len(seg) == 4 && (seg[3] == "cancel" || seg[3] == "events"):
		return "/v1/runs/{runId}/" + seg[3]
	}
	return "other"
}
