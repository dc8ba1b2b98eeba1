package dispatcher

import (
	"net/http"

	"github.com/servo-dev/servo/events"
	"github.com/servo-dev/servo/store"
	"github.com/servo-dev/servo/task"
)

// MaxWorkerNameBytes bounds the worker filter of GET /v1/tasks.
const MaxWorkerNameBytes = 128

// CountsResponse answers GET /v1/tasks:counts: how many tasks matching the
// filter are in each state (every state is present, zeros included).
type CountsResponse struct {
	Counts map[task.State]int `json:"counts"`
	Total  int                `json:"total"`
}

// countParams are the query parameters GET /v1/tasks:counts accepts.
var countParams = map[string]bool{"tenantId": true, "runId": true, "worker": true}

// counts serves GET /v1/tasks:counts?tenantId=&runId=&worker=.
func (h *handler) counts(w http.ResponseWriter, r *http.Request) {
	f, e := listFilter(r, countParams, "tenantId, runId, worker")
	if e != nil {
		h.fail(w, r, e)
		return
	}
	counts, err := h.cfg.Store.CountByState(r.Context(), f)
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp := CountsResponse{Counts: counts}
	for _, n := range counts {
		resp.Total += n
	}
	writeJSON(w, http.StatusOK, resp)
}

// EventsResponse answers GET /v1/tasks/{id}/events and
// GET /v1/runs/{runId}/events: the recorded transitions, each task's in seq
// order (a run's grouped by task), exactly as the events topic carries
// them. Entries are kept for store.OutboxRetention after delivery.
type EventsResponse struct {
	Events []events.Event `json:"events"`
}

// taskEvents serves GET /v1/tasks/{id}/events.
func (h *handler) taskEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !task.ValidID(id, task.TaskIDPrefix) {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: task.CodeTaskNotFound, Message: "no such task (task ids look like task_01H…)"})
		return
	}
	if _, err := h.cfg.Store.GetTask(r.Context(), id); err != nil {
		h.storeError(w, r, err, "taskId", id)
		return
	}
	entries, err := h.cfg.Store.OutboxEntries(r.Context(), id)
	h.writeEvents(w, r, entries, err)
}

// runEvents serves GET /v1/runs/{runId}/events.
func (h *handler) runEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("runId")
	if !task.ValidID(id, task.RunIDPrefix) {
		h.fail(w, r, invalid("runId", "must be a Servo run id (%s followed by a ULID)", task.RunIDPrefix))
		return
	}
	entries, err := h.cfg.Store.RunOutboxEntries(r.Context(), id)
	h.writeEvents(w, r, entries, err)
}

func (h *handler) writeEvents(w http.ResponseWriter, r *http.Request, entries []store.OutboxEntry, err error) {
	if err != nil {
		h.storeError(w, r, err)
		return
	}
	resp := EventsResponse{Events: make([]events.Event, 0, len(entries))}
	for _, e := range entries {
		resp.Events = append(resp.Events, events.EventOf(e.Transition))
	}
	writeJSON(w, http.StatusOK, resp)
}
