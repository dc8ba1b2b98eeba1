package cloudtasks

import (
	"fmt"
	"math"
	"strings"
)

// Resource-name grammar, as documented for google.cloud.tasks.v2.Queue.name
// and Task.name: letters and digits, some punctuation, a bounded length.
// Checked by hand: a bounded repetition such as {1,500} makes a regular
// expression that takes milliseconds to compile at package init, which
// every binary that links the package (the functions too) would pay.
var (
	projectIDRe  = idGrammar{extra: "-:.", max: math.MaxInt}
	locationIDRe = idGrammar{extra: "-", max: math.MaxInt}
	queueIDRe    = idGrammar{extra: "-", max: 100}
	taskIDRe     = idGrammar{extra: "_-", max: 500}
)

// idGrammar is a resource id: 1 to max ASCII letters, digits and the
// characters of extra.
type idGrammar struct {
	extra string
	max   int
}

// MatchString reports whether s is such an id.
func (g idGrammar) MatchString(s string) bool {
	if s == "" || len(s) > g.max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(g.extra, c) >= 0) {
			return false
		}
	}
	return true
}

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
		return locationName{}, fmt.Errorf("%w: %q is not of the form projects/PROJECT_ID/locations/LOCATION_ID", errInvalidName, s)
	}
	return checkLocation(p[1], p[3], s)
}

func checkLocation(project, location, s string) (locationName, error) {
	if !projectIDRe.MatchString(project) {
		return locationName{}, fmt.Errorf("%w: %q: PROJECT_ID may contain only letters, numbers, hyphens, colons and periods", errInvalidName, s)
	}
	if !locationIDRe.MatchString(location) {
		return locationName{}, fmt.Errorf("%w: %q: LOCATION_ID may contain only letters, numbers and hyphens", errInvalidName, s)
	}
	return locationName{project: project, location: location}, nil
}

func parseQueueName(s string) (queueName, error) {
	p := strings.Split(s, "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "locations" || p[4] != "queues" {
		return queueName{}, fmt.Errorf("%w: %q is not of the form projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID", errInvalidName, s)
	}
	loc, err := checkLocation(p[1], p[3], s)
	if err != nil {
		return queueName{}, err
	}
	if !queueIDRe.MatchString(p[5]) {
		return queueName{}, fmt.Errorf("%w: %q: QUEUE_ID may contain only letters, numbers and hyphens, at most 100 characters", errInvalidName, s)
	}
	return queueName{locationName: loc, queue: p[5]}, nil
}

func parseTaskName(s string) (taskName, error) {
	p := strings.Split(s, "/")
	if len(p) != 8 || p[0] != "projects" || p[2] != "locations" || p[4] != "queues" || p[6] != "tasks" {
		return taskName{}, fmt.Errorf("%w: %q is not of the form projects/PROJECT_ID/locations/LOCATION_ID/queues/QUEUE_ID/tasks/TASK_ID", errInvalidName, s)
	}
	q, err := parseQueueName(strings.Join(p[:6], "/"))
	if err != nil {
		return taskName{}, err
	}
	if !taskIDRe.MatchString(p[7]) {
		return taskName{}, fmt.Errorf("%w: %q: TASK_ID may contain only letters, numbers, hyphens and underscores, at most 500 characters", errInvalidName, s)
	}
	return taskName{queueName: q, task: p[7]}, nil
}
