package task

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Id prefixes.
const (
	TaskIDPrefix = "task_"
	RunIDPrefix  = "run_"
)

var (
	entropyMu sync.Mutex
	entropy   = ulid.Monotonic(rand.Reader, 0)
)

func newULID(now time.Time) string {
	entropyMu.Lock()
	defer entropyMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(now), entropy).String()
}

// NewTaskID returns a new, unique, time-sortable task id ("task_" + ULID).
func NewTaskID(now time.Time) string { return TaskIDPrefix + newULID(now) }

// NewRunID returns a new, unique, time-sortable run id ("run_" + ULID).
func NewRunID(now time.Time) string { return RunIDPrefix + newULID(now) }

// ValidID reports whether id has the prefix and a well-formed ULID.
func ValidID(id, prefix string) bool {
	if !strings.HasPrefix(id, prefix) {
		return false
	}
	_, err := ulid.ParseStrict(id[len(prefix):])
	return err == nil
}

// EventID is the deterministic id of a task's transition event: a hash of
// the task id and the transition's seq, which no other transition of the
// task has. (From and to do not identify a transition: a task whose Cloud
// Task could not be created goes QUEUED → PENDING → QUEUED in one attempt.)
func EventID(taskID string, seq int64) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", taskID, seq)))
	return "evt_" + hex.EncodeToString(sum[:12])
}

// DispatchName is the deterministic Cloud Tasks task id for an attempt's
// first dispatch: enqueueing the same attempt twice yields ALREADY_EXISTS,
// never a second delivery. The hash spreads names over the keyspace as Cloud
// Tasks advises. Re-drives use RedriveName.
func DispatchName(taskID string, attempt int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", taskID, attempt)))
	return hex.EncodeToString(sum[:16]) + "-" + strings.ToLower(strings.TrimPrefix(taskID, TaskIDPrefix)) + fmt.Sprintf("-a%d", attempt)
}

// RedriveName is the deterministic Cloud Tasks task id of an attempt's
// re-drive n: DispatchName for the first dispatch (n = 0), that name with
// "-r<n>" for the sweeper's re-drive n ≥ 1 ([Task.Redrives]). Cloud Tasks
// refuses a name for about an hour after its task ran or was deleted, so a
// re-drive of an attempt whose delivery was lost (answered 2xx without a
// `started`) needs a name of its own to be delivered again; repeating one
// re-drive's enqueue is still ALREADY_EXISTS.
func RedriveName(taskID string, attempt, redrive int) string {
	if redrive < 1 {
		return DispatchName(taskID, attempt)
	}
	return DispatchName(taskID, attempt) + fmt.Sprintf("-r%d", redrive)
}

// DerivedTaskID is the task id derived from key at time at: a ULID whose
// time is at and whose random part is a hash of key, so that the same
// (key, at) always names the same task (a schedule's fire: the store
// refuses a second task of that id) and ids sort by at.
func DerivedTaskID(at time.Time, key string) string {
	sum := sha256.Sum256([]byte(key))
	var u ulid.ULID
	if err := u.SetTime(ulid.Timestamp(at)); err != nil {
		panic(fmt.Sprintf("task: derived id at %s: %v", at, err))
	}
	if err := u.SetEntropy(sum[:10]); err != nil {
		panic(fmt.Sprintf("task: derived id: %v", err))
	}
	return TaskIDPrefix + u.String()
}
