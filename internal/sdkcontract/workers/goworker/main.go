// Command goworker is the contract worker of the shared SDK contract test
// (package sdkcontract), on the Go SDK: goworker push PORT | pull API POOL
// [MAX_WAIT_MS [GRACE_MS]] | job. A pull worker stops on SIGTERM (its
// context ends) and then prints STOPPING.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/servo-dev/servo/worker"
)

type payload struct {
	Steps         int `json:"steps"`
	StepMs        int `json:"stepMs"`
	FailAttempts  int `json:"failAttempts"`
	CrashAttempts int `json:"crashAttempts"`
	// FailCategory is the category of the failAttempts' errors
	// (default INFRASTRUCTURE).
	FailCategory string `json:"failCategory"`
}

// categories are the SDK's error classes by category name.
var categories = map[string]func(error) error{
	"USER_CODE": worker.UserCode, "DATA_QUALITY": worker.DataQuality, "INFRASTRUCTURE": worker.Infrastructure,
	"CONFIGURATION": worker.Configuration, "TIMEOUT": worker.Timeout, "CONFLICT": worker.Conflict,
	"CANCELLED": worker.Cancelled,
}

func handle(ctx context.Context, t *worker.Task) (any, error) {
	p := payload{Steps: 3, StepMs: 20, FailCategory: "INFRASTRUCTURE"}
	if err := t.Decode(&p); err != nil {
		return nil, worker.DataQuality(err)
	}
	fail, ok := categories[p.FailCategory]
	if !ok {
		return nil, worker.DataQuality(fmt.Errorf("unknown failCategory %q", p.FailCategory))
	}
	fmt.Printf("RUN %s %d\n", t.ID(), t.Attempt())
	var cp struct {
		Next int `json:"next"`
	}
	if _, err := t.DecodeResumeFrom(&cp); err != nil {
		return nil, err
	}
	start := cp.Next
	t.SetPhase("processing")
	for i := start; i < p.Steps; i++ {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(time.Duration(p.StepMs) * time.Millisecond):
		}
		if err := t.Checkpoint(map[string]int{"next": i + 1}); err != nil {
			return nil, err
		}
		t.Progress(100*(i+1)/p.Steps, "")
		if i+1 == p.Steps/2 && t.Attempt() <= p.CrashAttempts {
			time.Sleep(time.Second) // the checkpoint's heartbeat goes out first
			os.Exit(3)
		}
		// Attempts up to failAttempts fail at the half-way step, or at their
		// first step when they resumed past it.
		if i+1 >= p.Steps/2 && t.Attempt() <= p.FailAttempts {
			return nil, fail(fmt.Errorf("planned failure at step %d", i+1))
		}
	}
	return map[string]int{"attempt": t.Attempt(), "resumedFrom": start, "processed": p.Steps - start}, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "push":
		ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("listening on http://%s/\n", ln.Addr())
		_ = http.Serve(ln, worker.Handler(handle))
	case "pull":
		maxWait, grace := msArg(4, 2*time.Second), msArg(5, 5*time.Second)
		go func() {
			<-ctx.Done() // Pull sees the stop from now on
			fmt.Println("STOPPING")
		}()
		err := worker.Pull(ctx, worker.PullConfig{API: os.Args[2], Pool: os.Args[3], Concurrency: 2,
			MaxWait: maxWait, Grace: grace, DevIdentity: "contract-worker"}, handle)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "job":
		if err := worker.RunJob(ctx, handle); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// msArg is the duration in milliseconds of os.Args[i], def when absent.
func msArg(i int, def time.Duration) time.Duration {
	if len(os.Args) <= i {
		return def
	}
	ms, err := strconv.Atoi(os.Args[i])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return time.Duration(ms) * time.Millisecond
}
