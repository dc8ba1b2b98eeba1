// Command worker is an example Servo worker for Cloud Run: it serves
// partitions.Process with the worker SDK on $PORT (default 8080), at /,
// and answers GET /healthz with 204. On SIGTERM (Cloud Run allows 10 s on
// scale-in) it stops accepting deliveries and waits up to 8 s for the
// running attempts; an attempt cut off then is retried by Servo from its
// last checkpoint.
//
// With -pull POOL it takes no requests: it claims attempts from the pull pool
// POOL at $SERVO_API (worker.Pull) and runs them, -concurrency at a time.
// With -job it is a job worker instead: it runs the one attempt whose envelope
// Servo put in $SERVO_ENVELOPE (a Cloud Run Job execution, or a
// `servo dev --job-worker` subprocess) and exits 0 once the attempt's
// outcome is settled with Servo (1 if it could not be).
//
// Environment:
//
//	PORT                  listen port (Cloud Run sets it)
//	SERVO_OIDC_AUDIENCE   if set, verify the Cloud Tasks OIDC token for this audience
//	SERVO_OIDC_SA         if set (with the audience), also require this service account
//	LOG_LEVEL             debug, info (default), warn, error
//	OTEL_*                OpenTelemetry exporters by the standard variables
//	                      (OTEL_EXPORTER_OTLP_ENDPOINT, ...); none when unset
//	SERVO_API             (-pull) the claim URL base: `servo dev`'s address, or the ServoClaim function's URL
//	SERVO_DEV_IDENTITY    (-pull, local stack only) the identity to claim as
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/servo-dev/servo/examples/worker/partitions"
	"github.com/servo-dev/servo/worker"
	"github.com/servo-dev/servo/worker/googleauth"
)

func main() {
	pool := flag.String("pull", "", "claim from this pull pool instead of serving pushes")
	concurrency := flag.Int("concurrency", 4, "with -pull: attempts run at once")
	job := flag.Bool("job", false, "run one attempt from $SERVO_ENVELOPE (a Cloud Run Job execution) and exit")
	flag.Parse()
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("LOG_LEVEL"))); err != nil {
		level = slog.LevelInfo
	}
	log := worker.NewLogger(os.Stderr, level)
	opts := []worker.Option{worker.WithLogger(log)}
	if aud := os.Getenv("SERVO_OIDC_AUDIENCE"); aud != "" {
		var sas []string
		if sa := os.Getenv("SERVO_OIDC_SA"); sa != "" {
			sas = append(sas, sa)
		}
		opts = append(opts, googleauth.VerifyOIDC(aud, sas...))
	}
	// Traces and metrics where the OTEL_* variables say; nothing otherwise
	// (the worker's service account holds no Cloud Trace role).
	shutdown, err := setupTelemetry(context.Background())
	if err != nil {
		log.Warn("telemetry not set up", "error", err)
		shutdown = func(context.Context) error { return nil }
	}
	defer shutdown(context.Background())
	if *pool != "" {
		code := runPull(log, *pool, *concurrency, opts)
		_ = shutdown(context.Background())
		os.Exit(code)
	}
	if *job {
		if err := worker.RunJob(context.Background(), partitions.Process, opts...); err != nil {
			log.Error("job attempt not run", "error", err)
			os.Exit(1)
		}
		return
	}
	mux := newMux(opts...)

	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		// Cloud Run allows 10 s after SIGTERM. Attempts still running then
		// are lost; Servo's lease expiry retries them from their checkpoint.
		sctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("shutdown with attempts still running", "error", err)
		}
	}()
	log.Info("worker listening", "port", port)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("server failed", "error", err)
		os.Exit(1)
	}
}

// newMux serves the worker on / and a health check on GET /healthz.
func newMux(opts ...worker.Option) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/", worker.Handler(partitions.Process, opts...))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}

// runPull claims from pool until SIGINT or SIGTERM, then lets running
// attempts finish within the grace period; it returns the exit status.
func runPull(log *slog.Logger, pool string, concurrency int, opts []worker.Option) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := worker.PullConfig{
		API: os.Getenv("SERVO_API"), Pool: pool, Concurrency: concurrency,
		DevIdentity: os.Getenv("SERVO_DEV_IDENTITY"), Options: opts,
	}
	if strings.HasPrefix(cfg.API, "https://") {
		hc, err := googleauth.Client(ctx, cfg.API)
		if err != nil {
			log.Error("no ID token for the claims", "error", err)
			return 1
		}
		cfg.Client = hc
	}
	log.Info("worker claiming", "pool", pool, "api", cfg.API, "concurrency", concurrency)
	if err := worker.Pull(ctx, cfg, partitions.Process); err != nil {
		log.Error("pull stopped", "error", err)
		return 1
	}
	return 0
}
