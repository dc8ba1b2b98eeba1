package devstack

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/servo-dev/servo/internal/zombie"
)

// The sweeper is served by functions-framework-go, as on Cloud Functions,
// so the Pub/Sub emulator's raw push body is turned into a CloudEvent by
// the framework itself. The framework serves one global registry and
// cannot be stopped, so one process-wide server carries a single function
// that routes each tick to its stack's sweeper by a message attribute.
const (
	// sweepPath names the topic, as the framework wants for raw pushes.
	sweepPath = "/projects/servo-dev/topics/servo-sweep"
	stackAttr = "servoStack"
	// tickAttr names a stack's tick, for its ticker (rest.go).
	tickAttr = "servoTick"
	// functionTargetEnv is the framework's variable naming the function
	// to serve.
	functionTargetEnv = "FUNCTION_TARGET"
)

var router struct {
	once    sync.Once
	url     string
	err     error
	mu      sync.Mutex
	targets map[string]target
}

// target is a stack's sweeper, and the context that ends with the stack:
// an invocation sweeps for a whole window, and must stop when its stack
// closes. done, when set, is called after each invocation of the stack's
// with its tick's tickAttr (the resting ticker waits for it).
type target struct {
	sw   *zombie.Sweeper
	ctx  context.Context
	done func(tick string)
}

func registerSweeper(ctx context.Context, id string, sw *zombie.Sweeper, done func(tick string)) (string, error) {
	router.once.Do(func() { router.url, router.err = startRouter() })
	if router.err != nil {
		return "", router.err
	}
	router.mu.Lock()
	router.targets[id] = target{sw, ctx, done}
	router.mu.Unlock()
	return router.url, nil
}

func unregisterSweeper(id string) {
	router.mu.Lock()
	delete(router.targets, id)
	router.mu.Unlock()
}

func startRouter() (string, error) {
	router.targets = map[string]target{}
	if err := funcframework.RegisterCloudEventFunctionContext(context.Background(), sweepPath, routeTick); err != nil {
		return "", fmt.Errorf("devstack: register sweeper: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	// Without FUNCTION_TARGET the framework prints "Serving function: ..."
	// on stdout for each function, which is not Servo's output. With it,
	// the framework serves its last registered function (ours) at every
	// path, silently; the variable is set only until the server listens.
	prev, had := os.LookupEnv(functionTargetEnv)
	os.Setenv(functionTargetEnv, "servo-sweep-router")
	defer func() {
		if had {
			os.Setenv(functionTargetEnv, prev)
		} else {
			os.Unsetenv(functionTargetEnv)
		}
	}()
	go funcframework.StartHostPort("127.0.0.1", strconv.Itoa(port))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr, nil
		}
	}
	return "", fmt.Errorf("devstack: the sweeper's functions-framework server did not start on %s", addr)
}

// routeTick is the registered CloudEvent function: a Pub/Sub
// messagePublished event whose message names the stack.
func routeTick(ctx context.Context, e cloudevents.Event) error {
	var msg struct {
		Message struct {
			Attributes map[string]string `json:"attributes"`
		} `json:"message"`
	}
	if err := e.DataAs(&msg); err != nil {
		return fmt.Errorf("devstack: sweep tick: %w", err)
	}
	router.mu.Lock()
	t, ok := router.targets[msg.Message.Attributes[stackAttr]]
	router.mu.Unlock()
	if !ok {
		return nil // a tick for a stack that has stopped
	}
	if t.done != nil {
		defer t.done(msg.Message.Attributes[tickAttr])
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(t.ctx, cancel)()
	err := t.sw.HandleEvent(ctx, e)
	if t.ctx.Err() != nil {
		return nil // cut short by the stack's Close: not the framework's error to print
	}
	return err
}
