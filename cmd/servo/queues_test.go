package main

import (
	"strings"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/servo-dev/servo/emulator/cloudtasks"
	"github.com/servo-dev/servo/internal/devstack"
)

// servo queues against a Cloud Tasks emulator, as against servo dev's: a
// queue given by id is completed with $SERVO_PROJECT and the emulator's
// location; pause, show and resume report its state; an unknown queue is
// exit 3; a queue id without a project is a usage error.
func TestQueuesCommand(t *testing.T) {
	srv := cloudtasks.NewServer(cloudtasks.Options{})
	addr, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	t.Setenv(cloudtasks.EnvVar, addr)
	t.Setenv("SERVO_PROJECT", "servo-local")
	t.Setenv("GOOGLE_CLOUD_PROJECT", "")
	c, err := cloudtasks.NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := "projects/servo-local/locations/" + devstack.Location + "/queues/example"
	if _, err := c.CreateQueue(t.Context(), &cloudtaskspb.CreateQueueRequest{Parent: "projects/servo-local/locations/" + devstack.Location,
		Queue: &cloudtaskspb.Queue{Name: name}}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"queues", "pause", "example"}, name + " PAUSED"},
		{[]string{"queues", "show", name}, name + " PAUSED"},
		{[]string{"queues", "resume", "example"}, name + " RUNNING"},
	} {
		out, errOut, code := runCLI(t, step.args...)
		if code != 0 || strings.TrimSpace(out) != step.want {
			t.Fatalf("servo %v: exit %d %q %s; want %q", step.args, code, out, errOut, step.want)
		}
	}
	if q, err := c.GetQueue(t.Context(), &cloudtaskspb.GetQueueRequest{Name: name}); err != nil || q.GetState() != cloudtaskspb.Queue_RUNNING {
		t.Fatalf("the queue after resume: %v %v", q.GetState(), err)
	}
	if _, errOut, code := runCLI(t, "queues", "pause", "nosuch"); code != exitNotFound || !strings.Contains(errOut, "no queue") {
		t.Fatalf("unknown queue: exit %d %s", code, errOut)
	}
	t.Setenv("SERVO_PROJECT", "")
	if _, errOut, code := runCLI(t, "queues", "pause", "example"); code != exitUsage || !strings.Contains(errOut, "--project") {
		t.Fatalf("no project: exit %d %s", code, errOut)
	}
}
