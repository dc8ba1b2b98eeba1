package server

import (
	"context"
	"errors"
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
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/logs"
	"github.com/servo-dev/servo/internal/store"
)

// Open builds a Server as Servo deploys it: from cfg (config.FromEnv) and
// Google's own clients (Firestore, Cloud Tasks, Pub/Sub, Cloud Run jobs
// when a worker is a job; each emulator's when its *_EMULATOR_HOST is
// set), with the token keys of cfg.TokenKeys, re-read from Secret Manager
// on a kid miss. dash configures the dashboard. Close closes what Open
// opened; a failed Open closes it before it returns.
func Open(ctx context.Context, cfg config.Config, dash dashboard.Config) (_ *Server, err error) {
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
	keys, err := auth.OpenKeyRing(ctx, cfg.TokenKeys, func(name string) auth.RingSource { return keysecret.Source(name) })
	if err != nil {
		why := ErrMisconfigured
		if cfg.TokenKeys.Secret != "" {
			why = ErrSecret
		}
		return nil, fmt.Errorf("server: %w: %w", why, err)
	}
	st, err := store.New(ctx, cfg.Project, StoreOptions(cfg)...)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	closers = append(closers, st.Close)
	tasks, err := tasksClient(ctx, cfg.CloudTasksEmulatorHost)
	if err != nil {
		return nil, fmt.Errorf("server: cloud tasks client: %w", err)
	}
	closers = append(closers, tasks.Close)
	opts := Options{Store: st, Tasks: tasks, Keys: keys, Logger: log, Dashboard: dash, StoreTimeout: cfg.StoreTimeout}
	if hasJobWorker(cfg) {
		runner, err := jobs.NewCloudRun(ctx, cfg.JobsContainer)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		closers = append(closers, runner.Close)
		opts.Runner = runner
	}
	if opts.PubSub, err = pubsub.NewClient(ctx, cfg.Project); err != nil {
		return nil, fmt.Errorf("server: pubsub client: %w", err)
	}
	closers = append(closers, opts.PubSub.Close)
	s, err := New(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	s.closers = closers
	// A cold start's own cost, in the instance's logs (docs/operations.md,
	// "Sizing and cold starts").
	log.InfoContext(ctx, "dependencies built", "ms", float64(time.Since(began).Microseconds())/1000)
	return s, nil
}

// OpenEnv is Open with the configuration of the environment
// (config.FromEnv): what the public dispatcher, callbacks and zombie
// packages build.
func OpenEnv(ctx context.Context) (*Server, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("server: %w: %w", ErrMisconfigured, err)
	}
	return Open(ctx, cfg, dashboard.Config{})
}

// closeOpened closes, last opened first, what Open opened.
func (s *Server) closeOpened() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
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
