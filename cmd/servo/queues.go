package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/devstack"
)

// newQueuesCmd is `servo queues`: a worker's Cloud Tasks queue paused,
// resumed or shown, in production or in servo dev's emulator, as the
// runbook's "A queue paused" incident and its rehearsal need.
func newQueuesCmd() *cobra.Command {
	return group("queues", "Pause, resume or show a worker's Cloud Tasks queue (runbook rehearsals, servo dev too)",
		`  servo queues pause example        # servo dev: its emulator's queue of worker "example"
  servo queues resume example
  servo queues show projects/my-project/locations/us-central1/queues/servo-render`,
		queueCmd("pause", "Pause a queue: Cloud Tasks keeps its tasks and delivers none", func(ctx context.Context, c *cloudtasksapi.Client, name string) (*cloudtaskspb.Queue, error) {
			return c.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{Name: name})
		}),
		queueCmd("resume", "Resume a paused queue: its tasks are delivered again", func(ctx context.Context, c *cloudtasksapi.Client, name string) (*cloudtaskspb.Queue, error) {
			return c.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{Name: name})
		}),
		queueCmd("show", "Show a queue's state", func(ctx context.Context, c *cloudtasksapi.Client, name string) (*cloudtaskspb.Queue, error) {
			return c.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: name})
		}),
	)
}

func queueCmd(verb, short string, do func(context.Context, *cloudtasksapi.Client, string) (*cloudtaskspb.Queue, error)) *cobra.Command {
	var project, location string
	cmd := &cobra.Command{
		Use:   verb + " QUEUE [--project P] [--location L]",
		Short: short,
		Long: short + `.

QUEUE is a queue's full name (projects/P/locations/L/queues/Q) or its id,
completed with --project and --location. Against servo dev's
emulator when CLOUD_TASKS_EMULATOR_HOST is set (servo dev prints it; its
location is "` + devstack.Location + `" and its queues are named after the workers), else
Google's Cloud Tasks with Application Default Credentials
(roles/cloudtasks.queueAdmin to pause or resume, roles/cloudtasks.viewer
to show).`,
		Example: "  servo queues " + verb + " example                  # servo dev (CLOUD_TASKS_EMULATOR_HOST set)\n" +
			"  servo queues " + verb + " servo-render --project my-project --location us-central1",
		Args: exactArgs("QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := queueName(args[0], project, location)
			if err != nil {
				return err
			}
			c, err := cloudtasks.NewClient(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			q, err := do(cmd.Context(), c, name)
			switch {
			case status.Code(err) == codes.NotFound:
				return &exitError{exitNotFound, fmt.Errorf("no queue %s", name)}
			case err != nil:
				return fmt.Errorf("%s %s: %w", verb, name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", q.GetName(), q.GetState())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&project, "project", firstNonEmpty(os.Getenv("SERVO_PROJECT"), os.Getenv("GOOGLE_CLOUD_PROJECT")), "project of a queue given by id (default $SERVO_PROJECT, then $GOOGLE_CLOUD_PROJECT)")
	f.StringVar(&location, "location", "", "location of a queue given by id (default "+devstack.Location+" with CLOUD_TASKS_EMULATOR_HOST)")
	return cmd
}

// queueName completes a queue id into its full name.
func queueName(q, project, location string) (string, error) {
	if strings.HasPrefix(q, "projects/") {
		return q, nil
	}
	if location == "" && os.Getenv(cloudtasks.EnvVar) != "" {
		location = devstack.Location
	}
	switch {
	case strings.Contains(q, "/"):
		return "", usageErr("QUEUE %q: give a queue id or a full name projects/P/locations/L/queues/Q", q)
	case project == "":
		return "", usageErr("a queue given by id needs --project (or $SERVO_PROJECT)")
	case location == "":
		return "", usageErr("a queue given by id needs --location (the worker's region)")
	}
	return "projects/" + project + "/locations/" + location + "/queues/" + q, nil
}
