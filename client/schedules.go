package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/servo-dev/servo/api"
)

// schedulePath is the path of tenant's schedule id, with suffix (":trigger",
// ":backfill" or "") after the id, and its tenantId parameter (a schedule
// id is unique per tenant).
func schedulePath(tenant, id, suffix string) string {
	return "/v1/schedules/" + url.PathEscape(id) + suffix + "?" + url.Values{"tenantId": {tenant}}.Encode()
}

// CreateSchedule creates a schedule (POST /v1/schedules); an id the tenant
// already has is a 409 schedule_exists.
func (c *Client) CreateSchedule(ctx context.Context, req api.ScheduleRequest) (api.Schedule, error) {
	var s api.Schedule
	_, _, err := c.Do(ctx, http.MethodPost, "/v1/schedules", req, &s)
	return s, err
}

// ListSchedules reads one page of schedules (GET /v1/schedules; q:
// tenantId, pageSize, pageToken).
func (c *Client) ListSchedules(ctx context.Context, q url.Values) (api.SchedulesResponse, error) {
	var r api.SchedulesResponse
	_, _, err := c.Do(ctx, http.MethodGet, "/v1/schedules?"+q.Encode(), nil, &r)
	return r, err
}

// GetSchedule reads tenant's schedule id with its next fire times and its
// recent fires' task states.
func (c *Client) GetSchedule(ctx context.Context, tenant, id string) (api.Schedule, error) {
	var s api.Schedule
	_, _, err := c.Do(ctx, http.MethodGet, schedulePath(tenant, id, ""), nil, &s)
	return s, err
}

// UpdateSchedule changes the fields p sets (PATCH /v1/schedules/{id}):
// pause or unpause with a note, the spec, the task, the overlap policy or
// the catch-up window.
func (c *Client) UpdateSchedule(ctx context.Context, tenant, id string, p api.SchedulePatch) (api.Schedule, error) {
	var s api.Schedule
	_, _, err := c.Do(ctx, http.MethodPatch, schedulePath(tenant, id, ""), p, &s)
	return s, err
}

// DeleteSchedule deletes tenant's schedule id; the tasks of its fires are
// left as they are.
func (c *Client) DeleteSchedule(ctx context.Context, tenant, id string) error {
	_, _, err := c.Do(ctx, http.MethodDelete, schedulePath(tenant, id, ""), nil, nil)
	return err
}

// TriggerSchedule fires tenant's schedule id now (POST
// /v1/schedules/{id}:trigger) and returns the fires made.
func (c *Client) TriggerSchedule(ctx context.Context, tenant, id string, req api.TriggerRequest) (api.FireResponse, error) {
	var r api.FireResponse
	_, _, err := c.Do(ctx, http.MethodPost, schedulePath(tenant, id, ":trigger"), req, &r)
	return r, err
}

// BackfillSchedule makes the schedule's fires of a past range (POST
// /v1/schedules/{id}:backfill), oldest first, and returns them.
func (c *Client) BackfillSchedule(ctx context.Context, tenant, id string, req api.BackfillRequest) (api.FireResponse, error) {
	var r api.FireResponse
	_, _, err := c.Do(ctx, http.MethodPost, schedulePath(tenant, id, ":backfill"), req, &r)
	return r, err
}
