// Package functions registers Servo's Cloud Functions with
// functions-framework-go: ServoAPI (HTTP, the control API), ServoCallbacks
// (HTTP, worker callbacks), ServoSweeper (CloudEvent from Pub/Sub),
// ServoClaim (HTTP, pull-pool claims) and ServoJobs (HTTP, the jobs
// dispatch endpoint, called by Cloud Tasks).
//
// It is thin wiring: on its first request an instance reads its
// configuration from the environment (config.FromEnv; the variables are
// documented in docs/configuration.md), makes Google's clients and builds
// the handlers with server.New, as the local stack does with its own
// configuration and the emulators' clients. A build that fails is retried
// by a later request once a backoff has passed (1 s, doubling up to 30 s);
// meanwhile requests are answered at once with 503 unavailable and a
// Retry-After, and concurrent requests share one build in flight.
package functions

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/auth/keysecret"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/server"
	"github.com/servo-dev/servo/internal/store"
)

// serverInit builds the instance's Server. A failed build (a Secret
// Manager or Firestore hiccup, a bad variable) is retried by a later
// request after a backoff (1 s doubling to 30 s), not kept for the
// instance's life.
var serverInit = newLazy(newServer)

// newServer builds the Server from the environment and Google's clients.
func newServer(ctx context.Context) (_ *server.Server, err error) {
	// What a failed build opened is closed: the next build opens afresh.
	var closers []func() error
	defer func() {
		if err != nil {
			for _, c := range closers {
				_ = c()
			}
		}
	}()
	log := logs.Default()
	began := time.Now()
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	setupTelemetry(ctx, cfg.Project, cfg.ServiceName, cfg.TraceSampling)
	// The ring from SERVO_TOKEN_KEYS (no read); re-read from the secret
	// named by SERVO_TOKEN_KEYS_SECRET on a kid miss and every 5 minutes.
	keys, err := auth.OpenKeyRing(ctx, cfg.TokenKeys, func(name string) auth.RingSource { return keysecret.Source(name) })
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	st, err := store.New(ctx, cfg.Project, server.StoreOptions(cfg)...)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	closers = append(closers, st.Close)
	tasks, err := tasksClient(ctx, cfg.CloudTasksEmulatorHost)
	if err != nil {
		return nil, fmt.Errorf("functions: cloud tasks client: %w", err)
	}
	closers = append(closers, tasks.Close)
	opts := server.Options{Store: st, Tasks: tasks, Keys: keys, Logger: log, Dashboard: dashboardConfig(), StoreTimeout: cfg.StoreTimeout}
	if hasJobWorker(cfg) {
		runner, err := jobs.NewCloudRun(ctx, cfg.JobsContainer)
		if err != nil {
			return nil, fmt.Errorf("functions: %w", err)
		}
		closers = append(closers, runner.Close)
		opts.Runner = runner
	}
	if opts.PubSub, err = pubsub.NewClient(ctx, cfg.Project); err != nil {
		return nil, fmt.Errorf("functions: pubsub client: %w", err)
	}
	closers = append(closers, opts.PubSub.Close)
	s, err := server.New(ctx, cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	// A cold start's own cost, in the instance's logs (docs/operations.md,
	// "Sizing and cold starts").
	log.InfoContext(ctx, "dependencies built", "ms", float64(time.Since(began).Microseconds())/1000)
	return s, nil
}

// tasksClient returns a Cloud Tasks client. With an emulator's address
// (CLOUD_TASKS_EMULATOR_HOST) it talks to that emulator, plaintext and
// without credentials, as the Firestore and Pub/Sub clients do with
// FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST.
func tasksClient(ctx context.Context, emulatorHost string) (*cloudtasks.Client, error) {
	var opts []option.ClientOption
	if emulatorHost != "" {
		host := strings.TrimPrefix(strings.TrimPrefix(emulatorHost, "http://"), "dns:///")
		opts = append(opts, option.WithEndpoint(host), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithTelemetryDisabled())
	}
	return cloudtasks.NewClient(ctx, opts...)
}

func hasJobWorker(cfg config.Config) bool {
	for _, w := range cfg.Workers {
		if w.Job != "" {
			return true
		}
	}
	return false
}
