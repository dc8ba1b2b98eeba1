package service_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/pubsub/v2"

	"github.com/servo-dev/servo/internal/auth"
	"github.com/servo-dev/servo/internal/callbacks"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/dashboard"
	"github.com/servo-dev/servo/internal/dispatcher"
	"github.com/servo-dev/servo/internal/enqueue"
	"github.com/servo-dev/servo/internal/events"
	"github.com/servo-dev/servo/internal/jobs"
	"github.com/servo-dev/servo/internal/pull"
	"github.com/servo-dev/servo/internal/server"
	"github.com/servo-dev/servo/internal/service"
	"github.com/servo-dev/servo/internal/store"
	"github.com/servo-dev/servo/internal/zombie"
)

// Every service constructor answers a missing dependency with an error
// that names the field and wraps ErrMissingDependency, never with a
// panic; given every dependency it succeeds. The dependencies are zero
// values: the constructors only check that they are there.
func TestMissingDependency(t *testing.T) {
	st, keys, enq := &store.Store{}, &auth.KeyRing{}, &enqueue.Enqueuer{}
	api := http.NotFoundHandler()
	identity := pull.Identity(func(*http.Request) (string, error) { return "", nil })
	runner := jobs.NewLocal(nil, nil, nil)
	options := server.Options{Store: st, PubSub: &pubsub.Client{}, Tasks: &cloudtasks.Client{}, Keys: keys}
	withURL := config.Default()
	withURL.CallbackBaseURL = &url.URL{Scheme: "https", Host: "callbacks.example.com"}
	ok := func(_ any, err error) error { return err }

	cases := []struct {
		name string
		new  func() error
		// field is the missing field's name; "" for a complete Config.
		field string
	}{
		{"callbacks/no Store", func() error { return ok(callbacks.NewHandler(callbacks.Config{Keys: keys})) }, "Config.Store"},
		{"callbacks/no Keys", func() error { return ok(callbacks.NewHandler(callbacks.Config{Store: st})) }, "Config.Keys"},
		{"callbacks/none", func() error { return ok(callbacks.NewHandler(callbacks.Config{})) }, "Config.Store"},
		{"callbacks/complete", func() error { return ok(callbacks.NewHandler(callbacks.Config{Store: st, Keys: keys})) }, ""},

		{"dispatcher/no Store", func() error { return ok(dispatcher.NewHandler(dispatcher.Config{Enqueuer: enq})) }, "Config.Store"},
		{"dispatcher/no Enqueuer", func() error { return ok(dispatcher.NewHandler(dispatcher.Config{Store: st})) }, "Config.Enqueuer"},
		{"dispatcher/complete", func() error { return ok(dispatcher.NewHandler(dispatcher.Config{Store: st, Enqueuer: enq})) }, ""},

		{"pull/no Store", func() error {
			return ok(pull.NewHandler(pull.Config{Enqueuer: enq, Transport: &pull.Transport{}, Identity: identity}))
		}, "Config.Store"},
		{"pull/no Enqueuer", func() error {
			return ok(pull.NewHandler(pull.Config{Store: st, Transport: &pull.Transport{}, Identity: identity}))
		}, "Config.Enqueuer"},
		{"pull/no Transport", func() error {
			return ok(pull.NewHandler(pull.Config{Store: st, Enqueuer: enq, Identity: identity}))
		}, "Config.Transport"},
		{"pull/no Identity", func() error {
			return ok(pull.NewHandler(pull.Config{Store: st, Enqueuer: enq, Transport: &pull.Transport{}}))
		}, "Config.Identity"},
		{"pull/complete", func() error {
			return ok(pull.NewHandler(pull.Config{Store: st, Enqueuer: enq, Transport: &pull.Transport{}, Identity: identity}))
		}, ""},

		{"dashboard.New/no Store", func() error { return ok(dashboard.New(dashboard.Config{API: api})) }, "Config.Store"},
		{"dashboard.New/no API", func() error { return ok(dashboard.New(dashboard.Config{Store: st})) }, "Config.API"},
		{"dashboard.New/complete", func() error { return ok(dashboard.New(dashboard.Config{Store: st, API: api})) }, ""},
		{"dashboard.Mount/no Store", func() error { return ok(dashboard.Mount(api, dashboard.Config{})) }, "Config.Store"},
		{"dashboard.Mount/no API", func() error { return ok(dashboard.Mount(nil, dashboard.Config{Store: st})) }, "Config.API"},
		{"dashboard.Mount/complete", func() error { return ok(dashboard.Mount(api, dashboard.Config{Store: st})) }, ""},

		{"zombie/no Store", func() error { return ok(zombie.New(zombie.Config{Enqueuer: enq})) }, "Config.Store"},
		{"zombie/no Enqueuer", func() error { return ok(zombie.New(zombie.Config{Store: st})) }, "Config.Enqueuer"},
		{"zombie/complete", func() error { return ok(zombie.New(zombie.Config{Store: st, Enqueuer: enq})) }, ""},

		{"jobs/no Store", func() error { return ok(jobs.NewHandler(jobs.Config{Keys: keys, Runner: runner})) }, "Config.Store"},
		{"jobs/no Keys", func() error { return ok(jobs.NewHandler(jobs.Config{Store: st, Runner: runner})) }, "Config.Keys"},
		{"jobs/no Runner", func() error { return ok(jobs.NewHandler(jobs.Config{Store: st, Keys: keys})) }, "Config.Runner"},
		{"jobs/complete", func() error { return ok(jobs.NewHandler(jobs.Config{Store: st, Keys: keys, Runner: runner})) }, ""},

		{"enqueue/no Store", func() error {
			return ok(enqueue.New(enqueue.Config{Tasks: &cloudtasks.Client{}, Keys: keys, CallbackBaseURL: "https://cb.example"}))
		}, "Config.Store"},
		{"enqueue/no Tasks", func() error {
			return ok(enqueue.New(enqueue.Config{Store: st, Keys: keys, CallbackBaseURL: "https://cb.example"}))
		}, "Config.Tasks"},
		{"enqueue/no Keys", func() error {
			return ok(enqueue.New(enqueue.Config{Store: st, Tasks: &cloudtasks.Client{}, CallbackBaseURL: "https://cb.example"}))
		}, "Config.Keys"},
		{"enqueue/no CallbackBaseURL", func() error {
			return ok(enqueue.New(enqueue.Config{Store: st, Tasks: &cloudtasks.Client{}, Keys: keys}))
		}, "Config.CallbackBaseURL"},
		{"enqueue/complete", func() error {
			return ok(enqueue.New(enqueue.Config{Store: st, Tasks: &cloudtasks.Client{}, Keys: keys, CallbackBaseURL: "https://cb.example"}))
		}, ""},

		{"events/no Store", func() error { return ok(events.New(context.Background(), events.Config{Client: &pubsub.Client{}})) }, "Config.Store"},
		{"events/no Client", func() error { return ok(events.New(context.Background(), events.Config{Store: st})) }, "Config.Client"},

		{"server/no Store", func() error {
			o := options
			o.Store = nil
			return ok(server.New(context.Background(), withURL, o))
		}, "Options.Store"},
		{"server/no PubSub", func() error {
			o := options
			o.PubSub = nil
			return ok(server.New(context.Background(), withURL, o))
		}, "Options.PubSub"},
		{"server/no Tasks", func() error {
			o := options
			o.Tasks = nil
			return ok(server.New(context.Background(), withURL, o))
		}, "Options.Tasks"},
		{"server/no Keys", func() error {
			o := options
			o.Keys = nil
			return ok(server.New(context.Background(), withURL, o))
		}, "Options.Keys"},
		{"server/no CallbackBaseURL", func() error { return ok(server.New(context.Background(), config.Default(), options)) }, "Config.CallbackBaseURL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = c.new()
			}()
			if c.field == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if !errors.Is(err, service.ErrMissingDependency) {
				t.Fatalf("error %v, want one that wraps service.ErrMissingDependency", err)
			}
			var me *service.MissingError
			if !errors.As(err, &me) || me.Field != c.field {
				t.Errorf("error %v names %+v, want field %s", err, me, c.field)
			}
		})
	}
}

func TestMissingError(t *testing.T) {
	err := service.Missing("callbacks", "Config.Store")
	if got, want := err.Error(), "callbacks: Config.Store is required"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, service.ErrMissingDependency) {
		t.Error("does not wrap ErrMissingDependency")
	}
}

func TestDefaults(t *testing.T) {
	var now func() time.Time
	var log *slog.Logger
	service.Defaults(&now, &log)
	if now == nil || log == nil {
		t.Fatalf("Defaults left the clock (%t) or the logger (%t) nil", now == nil, log == nil)
	}
	if d := time.Since(now()); d < 0 || d > time.Minute {
		t.Errorf("default clock is %v off time.Now", d)
	}
	if !log.Enabled(context.Background(), slog.LevelInfo) || log.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("default logger is not logs.Default()'s INFO level")
	}

	fixed := time.Date(2030, 1, 15, 12, 0, 0, 0, time.UTC)
	now = func() time.Time { return fixed }
	mine := slog.New(slog.DiscardHandler)
	log = mine
	service.Defaults(&now, &log)
	if now() != fixed || log != mine {
		t.Error("Defaults replaced a given clock or logger")
	}
}
