package main

import (
	"context"
	"errors"
	"os"
	"time"

	"net/url"

	"cloud.google.com/go/pubsub/v2"
	"github.com/spf13/cobra"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
	"github.com/servo-dev/servo/internal/devstack"
	"github.com/servo-dev/servo/internal/events"
)

func newEventsCmd() *cobra.Command {
	return group("events", "Transition events", "  servo events tail --task task_01HGW5N7XHJM4GX29KZRXQP6N9 --all", newEventsTailCmd())
}

func newEventsTailCmd() *cobra.Command {
	var cf clientFlags
	var project, topic, taskID, run string
	var since time.Duration
	var all, raw bool
	cmd := &cobra.Command{
		Use:   "tail [--task ID | --run ID] [--since DURATION | --all]",
		Short: "Print transition events as they happen, after the recorded ones",
		Long: `Print state transitions as they are published, until Ctrl-C, as a table or,
with --json, one event JSON per line (NDJSON). They come from the control
API's event stream (GET /v1/events, the API from --api or $SERVO_API, as
--as when given): only the events of the tenants your roles let you view.
With --raw they are read from the events topic directly instead, for
services whose own Pub/Sub IAM lets them read every tenant's events.

With --all (every recorded transition) or --since DURATION (those of the last
DURATION), the task's or run's past transitions are first read from the
control API (GET /v1/tasks/{id}/events, GET /v1/runs/{runId}/events: the
store's record, kept 7 days), each task's in seq order, and then the live
stream follows without gap or duplicate at the seam: the live subscription
exists before the record is read, and an event is printed once by eventId.
--since and --all need --task or --run, and the API (--api or $SERVO_API).

With --raw, Pub/Sub is reached like any Google Cloud client: against the
local stack, export the PUBSUB_EMULATOR_HOST line servo dev prints.`,
		Example: `  servo events tail --run run_01HGW5N7XHJM4GX29KZRXQP6N9
  servo events tail --task task_01HGW5N7XHJM4GX29KZRXQP6N9 --all
  servo events tail --run run_01HGW5N7XHJM4GX29KZRXQP6N9 --since 10m --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			opts := events.TailOptions{TaskID: taskID, RunID: run, JSON: cf.json, Topic: topic}
			if all && since != 0 {
				return usageErr("pass --since or --all, not both")
			}
			if since < 0 {
				return usageErr("--since must be positive")
			}
			if (all || since > 0) && taskID == "" && run == "" {
				return usageErr("--since and --all replay a task's or a run's record: pass --task ID or --run ID")
			}
			var c *client.Client
			if !raw || all || since > 0 {
				var err error
				if c, err = cf.client(ctx); err != nil {
					return err
				}
			}
			if all || since > 0 {
				opts.Replay = func(ctx context.Context) ([]api.Event, error) {
					var evs []api.Event
					var err error
					if taskID != "" {
						evs, err = c.TaskEvents(ctx, taskID)
					} else {
						evs, err = c.RunEvents(ctx, run)
					}
					if err != nil {
						return nil, apiErr(err)
					}
					return mergeBySeq(evs), nil
				}
				if since > 0 {
					opts.ReplaySince = time.Now().Add(-since)
				}
			}
			var ps *pubsub.Client
			if raw {
				if project == "" {
					project = firstNonEmpty(os.Getenv("SERVO_PROJECT"), os.Getenv("GOOGLE_CLOUD_PROJECT"), devstack.DefaultProject)
				}
				var err error
				if ps, err = pubsub.NewClient(ctx, project); err != nil {
					return err
				}
				defer ps.Close()
			} else {
				q := url.Values{}
				if taskID != "" {
					q.Set("taskId", taskID)
				}
				if run != "" {
					q.Set("runId", run)
				}
				opts.Source = func(ctx context.Context, ready func(), each func(api.Event) error) error {
					for {
						// A stream ends when its token expires: open the
						// next with a fresh one (the client's token source
						// renews it; a dev token that expired is refused).
						err := c.StreamEvents(ctx, q, ready, each)
						if errors.Is(err, client.ErrStreamExpired) && ctx.Err() == nil {
							ready = nil
							continue
						}
						return apiErr(err)
					}
				}
			}
			err := events.Tail(ctx, ps, project, cmd.OutOrStdout(), opts)
			var ee *exitError
			if errors.As(err, &ee) {
				return ee
			}
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	cf.register(f)
	f.StringVar(&taskID, "task", "", "only this task's events")
	f.StringVar(&run, "run", "", "only this run's events")
	f.DurationVar(&since, "since", 0, "first print the recorded transitions of the last DURATION (e.g. 10m)")
	f.BoolVar(&all, "all", false, "first print every recorded transition")
	f.BoolVar(&raw, "raw", false, "read the events topic directly (services with Pub/Sub IAM; no access policy applies)")
	f.StringVar(&project, "project", "", "with --raw: project of the events topic (default $SERVO_PROJECT, $GOOGLE_CLOUD_PROJECT or "+devstack.DefaultProject+")")
	f.StringVar(&topic, "topic", events.DefaultEventsTopic, "with --raw: events topic")
	return cmd
}

// mergeBySeq orders recorded events for printing: each task's in seq
// order (as the API returns them), the tasks' interleaved by time.
func mergeBySeq(evs []api.Event) []api.Event {
	var order []string
	byTask := map[string][]api.Event{}
	for _, e := range evs {
		if _, ok := byTask[e.TaskID]; !ok {
			order = append(order, e.TaskID)
		}
		byTask[e.TaskID] = append(byTask[e.TaskID], e)
	}
	out := make([]api.Event, 0, len(evs))
	for len(out) < len(evs) {
		best := ""
		for _, id := range order {
			q := byTask[id]
			if len(q) > 0 && (best == "" || q[0].OccurredAt.Before(byTask[best][0].OccurredAt)) {
				best = id
			}
		}
		out = append(out, byTask[best][0])
		byTask[best] = byTask[best][1:]
	}
	return out
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
