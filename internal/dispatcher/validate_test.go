package dispatcher

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/task"
)

// Every bad field is 400 invalid_request naming the field, and stores
// nothing.
func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	set := func(kv ...any) func(map[string]any) {
		return func(m map[string]any) {
			for i := 0; i < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
		}
	}
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	cases := []struct {
		name  string
		edit  func(map[string]any)
		field string
	}{
		{"tenantId missing", del("tenantId"), "tenantId"},
		{"tenantId empty", set("tenantId", ""), "tenantId"},
		{"tenantId too long", set("tenantId", strings.Repeat("t", maxTenantIDBytes+1)), "tenantId"},
		{"tenantId control character", set("tenantId", "ac\nme"), "tenantId"},
		{"tenantId not a string", set("tenantId", 5), "tenantId"},
		{"workspaceId missing", del("workspaceId"), "workspaceId"},
		{"workspaceId too long", set("workspaceId", strings.Repeat("w", maxWorkspaceIDBytes+1)), "workspaceId"},
		{"taskKey missing", del("taskKey"), "taskKey"},
		{"taskKey too long", set("taskKey", strings.Repeat("k", maxTaskKeyBytes+1)), "taskKey"},
		{"assetId too long", set("assetId", strings.Repeat("a", maxAssetIDBytes+1)), "assetId"},
		{"assetId control character", set("assetId", "a\x00b"), "assetId"},
		{"runId malformed", set("runId", "run-1"), "runId"},
		{"runId with a task prefix", set("runId", task.NewTaskID(time.Now())), "runId"},
		{"worker missing", del("worker"), "worker"},
		{"worker unknown", set("worker", "transcode"), "worker"},
		{"worker is a URL", set("worker", "https://attacker.example/hook"), "worker"},
		{"worker loopback URL", set("worker", "http://169.254.169.254/computeMetadata/v1/"), "worker"},
		{"worker an object", set("worker", map[string]any{"url": "https://attacker.example"}), "worker"},
		{"resources an array", set("resources", []int{1}), "resources"},
		{"resources a string", set("resources", "big"), "resources"},
		{"deadline not RFC 3339", set("deadline", "tomorrow"), "deadline"},
		{"deadline a date", set("deadline", "2030-01-15"), "deadline"},
		{"deadline in the past", set("deadline", past), "deadline"},
		{"deadline a number", set("deadline", 1893456000), "deadline"},
		{"heartbeatIntervalMs zero", set("heartbeatIntervalMs", 0), "heartbeatIntervalMs"},
		{"heartbeatIntervalMs below the minimum", set("heartbeatIntervalMs", 50), "heartbeatIntervalMs"},
		{"heartbeatIntervalMs above the maximum", set("heartbeatIntervalMs", task.MaxTimer.Milliseconds()+1), "heartbeatIntervalMs"},
		{"heartbeatIntervalMs fractional", set("heartbeatIntervalMs", 1000.5), "heartbeatIntervalMs"},
		{"heartbeatIntervalMs a string", set("heartbeatIntervalMs", "1000"), "heartbeatIntervalMs"},
		{"heartbeatIntervalMs beyond half the max token lifetime", set("heartbeatIntervalMs", task.MaxTokenTTL.Milliseconds()/2+1), "heartbeatIntervalMs"},
		{"heartbeatTimeoutMs below 2 × interval", set("heartbeatIntervalMs", 1000, "heartbeatTimeoutMs", 1500), "heartbeatTimeoutMs"},
		{"heartbeatTimeoutMs below 2 × default interval", set("heartbeatTimeoutMs", 50000), "heartbeatTimeoutMs"},
		{"heartbeatTimeoutMs negative", set("heartbeatTimeoutMs", -1), "heartbeatTimeoutMs"},
		{"cancelGracePeriodMs zero", set("cancelGracePeriodMs", 0), "cancelGracePeriodMs"},
		{"cancelGracePeriodMs above the maximum", set("cancelGracePeriodMs", task.MaxTimer.Milliseconds()+1), "cancelGracePeriodMs"},
		{"retry not an object", set("retry", 3), "retry"},
		{"retry unknown field", set("retry", map[string]any{"jitter": true}), "retry.jitter"},
		{"retry.maxAttempts zero", set("retry", map[string]any{"maxAttempts": 0}), "retry.maxAttempts"},
		{"retry.maxAttempts above the limit", set("retry", map[string]any{"maxAttempts": api.MaxAttemptsLimit + 1}), "retry.maxAttempts"},
		{"retry.maxAttempts a string", set("retry", map[string]any{"maxAttempts": "3"}), "retry.maxAttempts"},
		{"retry.initialBackoffMs below the minimum", set("retry", map[string]any{"initialBackoffMs": 10}), "retry.initialBackoffMs"},
		{"retry.backoffCoefficient below 1", set("retry", map[string]any{"backoffCoefficient": 0.5}), "retry.backoffCoefficient"},
		{"retry.backoffCoefficient above 10", set("retry", map[string]any{"backoffCoefficient": 11}), "retry.backoffCoefficient"},
		{"retry.maxBackoffMs below initialBackoffMs", set("retry", map[string]any{"initialBackoffMs": 5000, "maxBackoffMs": 4000}), "retry.maxBackoffMs"},
		{"priority zero", set("priority", 0), "priority"},
		{"priority below 1", set("priority", -1), "priority"},
		{"priority above 5", set("priority", 6), "priority"},
		{"priority a string", set("priority", "high"), "priority"},
		{"priority fractional", set("priority", 2.5), "priority"},
		{"retry.maxTotalAttempts zero", set("retry", map[string]any{"maxTotalAttempts": 0}), "retry.maxTotalAttempts"},
		{"retry.maxTotalAttempts above the limit", set("retry", map[string]any{"maxTotalAttempts": api.MaxAttemptsLimit + 1}), "retry.maxTotalAttempts"},
		{"retry.byCategory not an object", set("retry", map[string]any{"byCategory": []int{1}}), "retry.byCategory"},
		{"retry.byCategory unknown category", set("retry", map[string]any{"byCategory": map[string]any{"conflict": map[string]any{}}}), "retry.byCategory.conflict"},
		{"retry.byCategory a category never retried", set("retry", map[string]any{"byCategory": map[string]any{"DATA_QUALITY": map[string]any{"maxAttempts": 2}}}), "retry.byCategory.DATA_QUALITY"},
		{"retry.byCategory unknown field", set("retry", map[string]any{"byCategory": map[string]any{"CONFLICT": map[string]any{"jitter": 1}}}), "retry.byCategory.CONFLICT.jitter"},
		{"retry.byCategory maxAttempts zero", set("retry", map[string]any{"byCategory": map[string]any{"CONFLICT": map[string]any{"maxAttempts": 0}}}), "retry.byCategory.CONFLICT.maxAttempts"},
		{"retry.byCategory initialBackoffMs below the minimum", set("retry", map[string]any{"byCategory": map[string]any{"TIMEOUT": map[string]any{"initialBackoffMs": 10}}}), "retry.byCategory.TIMEOUT.initialBackoffMs"},
		{"retry.byCategory backoffCoefficient above 10", set("retry", map[string]any{"byCategory": map[string]any{"USER_CODE": map[string]any{"backoffCoefficient": 11}}}), "retry.byCategory.USER_CODE.backoffCoefficient"},
		{"retry.byCategory maxBackoffMs below initialBackoffMs", set("retry", map[string]any{"byCategory": map[string]any{"CONFLICT": map[string]any{"initialBackoffMs": 5000, "maxBackoffMs": 4000}}}), "retry.byCategory.CONFLICT.maxBackoffMs"},
		{"idempotencyKey too long", set("idempotencyKey", strings.Repeat("i", maxIdempotencyKeyBytes+1)), "idempotencyKey"},
		{"idempotencyKey not a string", set("idempotencyKey", 42), "idempotencyKey"},
		{"rerunOf malformed", set("rerunOf", "task-1"), "rerunOf"},
		{"rerunOf a run id", set("rerunOf", task.NewRunID(time.Now())), "rerunOf"},
		{"rerunOf names no task", set("rerunOf", task.NewTaskID(time.Now())), "rerunOf"},
		{"rerunOf not a string", set("rerunOf", 7), "rerunOf"},
		{"unknown field url", set("url", "https://attacker.example"), "url"},
		{"field in the wrong case", set("TenantID", "acme"), "TenantID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := validSubmit("acme")
			c.edit(body)
			r := e.do("POST", "/v1/tasks", body, "")
			checkInvalid(t, r, c.field)
		})
	}

	raw := []struct{ name, body string }{
		{"not JSON", "tenantId=acme"},
		{"truncated JSON", `{"tenantId": "acme"`},
		{"an array", `[{"tenantId": "acme"}]`},
		{"null", `null`},
		{"trailing data", `{"tenantId": "acme"} {}`},
		{"empty", ``},
	}
	for _, c := range raw {
		t.Run("body "+c.name, func(t *testing.T) {
			checkInvalid(t, e.do("POST", "/v1/tasks", c.body, "application/json"), "body")
		})
	}

	all, _, err := e.st.List(e.ctx, store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Fatalf("rejected submits stored %d tasks", len(all))
	}
	// The same body without the bad field is accepted.
	e.submit(validSubmit("acme"), http.StatusCreated)
}

func checkInvalid(t *testing.T, r response, field string) {
	t.Helper()
	if r.status != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", r.status, r.body)
	}
	eb := r.err(t)
	if eb.Code != api.CodeInvalidRequest || eb.Field != field || eb.Message == "" {
		t.Fatalf("answer = %+v, want invalid_request for field %q", eb, field)
	}
}

// The list and cancel parameters are validated too.
func TestQueryAndCancelValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{paused: true})
	sr := e.submit(validSubmit("acme"), http.StatusCreated)
	for _, c := range []struct{ query, field string }{
		{"state=DONE", "state"},
		{"state=queued", "state"},
		{"pageSize=0", "pageSize"},
		{"pageSize=501", "pageSize"},
		{"pageSize=ten", "pageSize"},
		{"pageToken=not-a-token", "pageToken"},
		{"runId=run-1", "runId"},
		{"tenant=acme", "tenant"},
		{"tenantId=a&tenantId=b", "tenantId"},
		{"tenantId=" + strings.Repeat("t", maxTenantIDBytes+1), "tenantId"},
	} {
		t.Run("list "+c.query, func(t *testing.T) {
			checkInvalid(t, e.do("GET", "/v1/tasks?"+c.query, nil, ""), c.field)
		})
	}
	for _, c := range []struct{ body, field string }{
		{fmt.Sprintf(`{"reason": %q}`, strings.Repeat("r", maxReasonBytes+1)), "reason"},
		{`{"reason": 5}`, "reason"},
		{`{"why": "x"}`, "why"},
		{`"stop"`, "body"},
	} {
		t.Run("cancel "+c.body[:min(len(c.body), 20)], func(t *testing.T) {
			checkInvalid(t, e.do("POST", "/v1/tasks/"+sr.TaskID+"/cancel", c.body, ""), c.field)
		})
	}
	if v := e.getTask(sr.TaskID); v.State != api.Queued {
		t.Fatalf("rejected cancels changed the task: %s", v.State)
	}
}
