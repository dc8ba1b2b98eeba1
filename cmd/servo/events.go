package main

import (
	"context"
	"errors"
	"flag"
	"os"

	"cloud.google.com/go/pubsub/v2"

	"github.com/servo-dev/servo/devstack"
	"github.com/servo-dev/servo/events"
)

func cmdEventsTail(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("events tail", flag.ContinueOnError)
	project := fs.String("project", firstNonEmpty(os.Getenv("SERVO_PROJECT"), os.Getenv("GOOGLE_CLOUD_PROJECT"), devstack.DefaultProject), "project of the events topic")
	topic := fs.String("topic", events.DefaultEventsTopic, "events topic")
	taskID := fs.String("task", "", "only this task")
	run := fs.String("run", "", "only this run")
	asJSON := fs.Bool("json", false, "JSON lines instead of a table")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	c, err := pubsub.NewClient(ctx, *project)
	if err != nil {
		return err
	}
	defer c.Close()
	err = events.Tail(ctx, c, *project, os.Stdout, events.TailOptions{TaskID: *taskID, RunID: *run, JSON: *asJSON, Topic: *topic})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
