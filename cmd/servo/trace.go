package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/internal/telemetry"
)

// getTrace prints a task's spans (GET /v1/tasks/{id}/trace, served by
// servo dev from the spans it keeps in memory) as a timeline: start offset,
// duration, status, the hop's indented name, and its Servo attributes.
func getTrace(ctx context.Context, c *client.Client, id string, w io.Writer, asJSON bool) error {
	var tt telemetry.TaskTrace
	raw, _, err := c.Do(ctx, "GET", "/v1/tasks/"+url.PathEscape(id)+"/trace", nil, &tt)
	if err != nil {
		return apiErr(err)
	}
	if asJSON {
		return printJSON(w, raw)
	}
	printTimeline(w, tt)
	return nil
}

// printTimeline renders the spans in start order, each indented under its
// parent when the parent is in the answer.
func printTimeline(w io.Writer, tt telemetry.TaskTrace) {
	depth := map[string]int{}
	traces := map[string]bool{}
	for _, s := range tt.Spans {
		traces[s.TraceID] = true
	}
	fmt.Fprintf(w, "Task %s: %d spans in %d traces\n", tt.TaskID, len(tt.Spans), len(traces))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OFFSET\tDURATION\tSTATUS\tSPAN\tATTEMPT\tDETAIL")
	for _, s := range tt.Spans {
		d := 0
		if pd, ok := depth[s.ParentSpanID]; ok && s.ParentSpanID != "" {
			d = pd + 1
		}
		depth[s.SpanID] = d
		status := s.Status
		if status == "Unset" {
			status = "ok"
		}
		var detail []string
		for _, k := range []string{"servo.callback", "servo.disposition", "servo.duty", "servo.result", "servo.outcome", "http.response.status_code", "servo.to"} {
			if v, ok := s.Attributes[k]; ok {
				detail = append(detail, strings.TrimPrefix(k, "servo.")+"="+v)
			}
		}
		if len(s.Links) > 0 {
			detail = append(detail, fmt.Sprintf("links=%d", len(s.Links)))
		}
		fmt.Fprintf(tw, "+%.1fms\t%.1fms\t%s\t%s%s\t%s\t%s\n", s.OffsetMs, s.DurationMs, status,
			strings.Repeat("  ", d), s.Name, dash(s.Attributes["servo.attempt"]), strings.Join(detail, " "))
	}
	tw.Flush()
}
