package cloudtasks

import (
	"fmt"
	"regexp"
	"strings"
)

// Resource-name grammar, as documented for google.cloud.tasks.v2.Queue.name
// and Task.name.
var (
	projectIDRe  = regexp.MustCompile(`^[A-Za-z0-9\-:.]+$`)
	locationIDRe = regexp.MustCompile(`^[A-Za-z0-9\-]+$`)
	queueIDRe    = regexp.MustCompile(`^[A-Za-z0-9\-]{1,100}$`)
	taskIDRe     = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,500}$`)
)

// locationName is projects/PROJECT_ID/locations/LOCATION_ID.
type locationName struct{ project, location string }

func (l locationName) String() string {
	return "projects/" + l.project + "/locations/" + l.location
}

// queueName is projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID.
type queueName struct {
	locationName
	queue string
}

func (q queueName) String() string { return q.locationName.String() + "/queues/" + q.queue }

// taskName is …/queues/QUEUE_ID/tasks/TASK_ID.
type taskName struct {
	queueName
	task string
}

func (t taskName) String() string { return t.queueName.String() + "/tasks/" + t.task }

func parseLocationName(s string) (locationName, error) {
	p := strings.Split(s, "/")
	if len(p) != 4 || p[0] != "projects" || p[2] != "locations" {
		return locationName{}, fmt.Errorf("%w: %q is not of the form projects/PROJECT_ID/locations/LOCATION_ID", ErrInvalidName, s)
	}
	return checkLocation(p[1], p[3], s)
}

func checkLocation(project, location, s string) (locationName, error) {
	if !projectIDRe.MatchString(project) {
		return locationName{}, fmt.Errorf("%w: %q: PROJECT_ID may contain only letters, numbers, hyphens, colons and periods", ErrInvalidName, s)
	}
	if !locationIDRe.MatchString(location) {
		return locationName{}, fmt.Errorf("%w: %q: LOCATION_ID may contain only letters, numbers and hyphens", ErrInvalidName, s)
	}
	return locationName{project: project, location: location}, nil
}

func parseQueueName(s string) (queueName, error) {
	p := strings.Split(s, "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "locations" || p[4] != "queues" {
		return queueName{}, fmt.Errorf("%w: %q is not of the form projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID", ErrInvalidName, s)
	}
	loc, err := checkLocation(p[1], p[3], s)
	if err != nil {
		return queueName{}, err
	}
	if !queueIDRe.MatchString(p[5]) {
		return queueName{}, fmt.Errorf("%w: %q: QUEUE_ID may contain only letters, numbers and hyphens, at most 100 characters", ErrInvalidName, s)
	}
	return queueName{locationName: loc, queue: p[5]}, nil
}

func parseTaskName(s string) (taskName, error) {
	p := strings.Split(s, "/")
	if len(p) != 8 || p[0] != "projects" || p[2] != "locations" || p[4] != "queues" || p[6] != "tasks" {
		return taskName{}, fmt.Errorf("%w: %q is not of the form projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID/tasks/TASK_ID", ErrInvalidName, s)
	}
	q, err := parseQueueName(strings.Join(p[:6], "/"))
	if err != nil {
		return taskName{}, err
	}
	if !taskIDRe.MatchString(p[7]) {
		return taskName{}, fmt.Errorf("%w: %q: TASK_ID may contain only letters, numbers, hyphens and underscores, at most 500 characters", ErrInvalidName, s)
	}
	return taskName{queueName: q, task: p[7]}, nil
}
