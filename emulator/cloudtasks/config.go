package cloudtasks

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Queue defaults the real service picks when a field is left unspecified.
const (
	// defaultMaxDispatchesPerSecond is RateLimits.max_dispatches_per_second.
	defaultMaxDispatchesPerSecond = 500
	// defaultMaxConcurrentDispatches is RateLimits.max_concurrent_dispatches.
	defaultMaxConcurrentDispatches = 1000
	// defaultMaxAttempts is RetryConfig.max_attempts.
	defaultMaxAttempts = 100
	// defaultMinBackoff is RetryConfig.min_backoff.
	defaultMinBackoff = 100 * time.Millisecond
	// defaultMaxBackoff is RetryConfig.max_backoff.
	defaultMaxBackoff = time.Hour
	// defaultMaxDoublings is RetryConfig.max_doublings.
	defaultMaxDoublings = 16

	maxDispatchesPerSecondLimit  = 500
	maxConcurrentDispatchesLimit = 5000
	maxBurstSize                 = 100
)

// defaultRetryConfig is the queue-level retry configuration used for every
// field a queue leaves unspecified.
func defaultRetryConfig() *pb.RetryConfig {
	return &pb.RetryConfig{
		MaxAttempts:      defaultMaxAttempts,
		MinBackoff:       durationpb.New(defaultMinBackoff),
		MaxBackoff:       durationpb.New(defaultMaxBackoff),
		MaxDoublings:     defaultMaxDoublings,
		MaxRetryDuration: durationpb.New(0),
	}
}

// burstFor is the max_burst_size the emulator picks for a rate: the rate
// rounded up, between 1 and 100 (the real service reports 100 for its
// default rate of 500/s).
func burstFor(rate float64) int32 {
	b := math.Ceil(rate)
	if b < 1 {
		b = 1
	}
	if b > maxBurstSize {
		b = maxBurstSize
	}
	return int32(b)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalidArgument, fmt.Sprintf(format, args...))
}

// checkDuration validates an optional, non-negative Duration field.
func checkDuration(field string, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return invalidf("%s: %v", field, err)
	}
	if d.AsDuration() < 0 {
		return invalidf("%s must not be negative", field)
	}
	return nil
}

// normalizeRetryConfig validates rc and fills every unspecified field from
// fallback. A zero or absent value means unspecified, as in the API's JSON
// form; so max_doublings cannot be set to 0 (the same holds for the REST API).
func normalizeRetryConfig(rc, fallback *pb.RetryConfig) (*pb.RetryConfig, error) {
	out := proto.Clone(fallback).(*pb.RetryConfig)
	if rc == nil {
		return out, nil
	}
	if rc.MaxAttempts < -1 {
		return nil, invalidf("retry_config.max_attempts must be >= -1, got %d", rc.MaxAttempts)
	}
	if rc.MaxAttempts != 0 {
		out.MaxAttempts = rc.MaxAttempts
	}
	if rc.MaxDoublings < 0 {
		return nil, invalidf("retry_config.max_doublings must not be negative, got %d", rc.MaxDoublings)
	}
	if rc.MaxDoublings != 0 {
		out.MaxDoublings = rc.MaxDoublings
	}
	for _, f := range []struct {
		name string
		in   *durationpb.Duration
		out  **durationpb.Duration
	}{
		{"retry_config.min_backoff", rc.MinBackoff, &out.MinBackoff},
		{"retry_config.max_backoff", rc.MaxBackoff, &out.MaxBackoff},
		{"retry_config.max_retry_duration", rc.MaxRetryDuration, &out.MaxRetryDuration},
	} {
		if err := checkDuration(f.name, f.in); err != nil {
			return nil, err
		}
		if f.in != nil {
			*f.out = proto.Clone(f.in).(*durationpb.Duration)
		}
	}
	if out.MinBackoff.AsDuration() > out.MaxBackoff.AsDuration() {
		return nil, invalidf("retry_config.min_backoff (%v) must not exceed max_backoff (%v)",
			out.MinBackoff.AsDuration(), out.MaxBackoff.AsDuration())
	}
	return out, nil
}

// checkRetryConfig validates a task-level retry config without filling it.
func checkRetryConfig(rc *pb.RetryConfig) error {
	if rc == nil {
		return nil
	}
	if rc.MaxAttempts < -1 {
		return invalidf("retry_config.max_attempts must be >= -1, got %d", rc.MaxAttempts)
	}
	if rc.MaxDoublings < 0 {
		return invalidf("retry_config.max_doublings must not be negative, got %d", rc.MaxDoublings)
	}
	for name, d := range map[string]*durationpb.Duration{
		"retry_config.min_backoff":        rc.MinBackoff,
		"retry_config.max_backoff":        rc.MaxBackoff,
		"retry_config.max_retry_duration": rc.MaxRetryDuration,
	} {
		if err := checkDuration(name, d); err != nil {
			return err
		}
	}
	if rc.MinBackoff != nil && rc.MaxBackoff != nil && rc.MinBackoff.AsDuration() > rc.MaxBackoff.AsDuration() {
		return invalidf("retry_config.min_backoff must not exceed max_backoff")
	}
	return nil
}

// normalizeQueueConfig validates the mutable fields of q and fills in the
// defaults, in place. It leaves name, state and purge_time alone.
func normalizeQueueConfig(q *pb.Queue) error {
	rl := q.RateLimits
	if rl == nil {
		rl = &pb.RateLimits{}
		q.RateLimits = rl
	}
	switch r := rl.MaxDispatchesPerSecond; {
	case math.IsNaN(r) || r < 0 || r > maxDispatchesPerSecondLimit:
		return invalidf("rate_limits.max_dispatches_per_second must be in (0, %d], got %v", maxDispatchesPerSecondLimit, r)
	case r == 0:
		rl.MaxDispatchesPerSecond = defaultMaxDispatchesPerSecond
	}
	switch c := rl.MaxConcurrentDispatches; {
	case c < 0 || c > maxConcurrentDispatchesLimit:
		return invalidf("rate_limits.max_concurrent_dispatches must be in [1, %d], got %d", maxConcurrentDispatchesLimit, c)
	case c == 0:
		rl.MaxConcurrentDispatches = defaultMaxConcurrentDispatches
	}
	rl.MaxBurstSize = burstFor(rl.MaxDispatchesPerSecond) // output only

	rc, err := normalizeRetryConfig(q.RetryConfig, defaultRetryConfig())
	if err != nil {
		return err
	}
	q.RetryConfig = rc

	if lc := q.StackdriverLoggingConfig; lc != nil && (math.IsNaN(lc.SamplingRatio) || lc.SamplingRatio < 0 || lc.SamplingRatio > 1) {
		return invalidf("stackdriver_logging_config.sampling_ratio must be in [0, 1], got %v", lc.SamplingRatio)
	}
	return checkHTTPTarget(q.HttpTarget)
}

func checkHTTPTarget(ht *pb.HttpTarget) error {
	if ht == nil {
		return nil
	}
	if o := ht.UriOverride; o != nil {
		if o.Host != nil && *o.Host == "" {
			return invalidf("http_target.uri_override.host must not be empty")
		}
		if o.Port != nil && (*o.Port < 0 || *o.Port > 65535) {
			return invalidf("http_target.uri_override.port must be in [0, 65535], got %d", *o.Port)
		}
	}
	for _, h := range ht.HeaderOverrides {
		if h.GetHeader().GetKey() == "" {
			return invalidf("http_target.header_overrides: header key must not be empty")
		}
	}
	switch a := ht.AuthorizationHeader.(type) {
	case *pb.HttpTarget_OidcToken:
		if a.OidcToken.GetServiceAccountEmail() == "" {
			return invalidf("http_target.oidc_token.service_account_email is required")
		}
	case *pb.HttpTarget_OauthToken:
		if a.OauthToken.GetServiceAccountEmail() == "" {
			return invalidf("http_target.oauth_token.service_account_email is required")
		}
	}
	return nil
}

// outputOnlyQueuePaths are update-mask paths that UpdateQueue ignores.
var outputOnlyQueuePaths = map[string]bool{
	"name": true, "state": true, "purge_time": true, "rate_limits.max_burst_size": true,
}

// applyQueueMask copies the fields named by paths from src to dst. An empty
// mask replaces every mutable field.
func applyQueueMask(dst, src *pb.Queue, paths []string) error {
	if len(paths) == 0 {
		dst.AppEngineRoutingOverride = src.AppEngineRoutingOverride
		dst.HttpTarget = src.HttpTarget
		dst.RateLimits = src.RateLimits
		dst.RetryConfig = src.RetryConfig
		dst.StackdriverLoggingConfig = src.StackdriverLoggingConfig
		return nil
	}
	for _, p := range paths {
		if outputOnlyQueuePaths[p] {
			continue
		}
		if err := copyPath(dst.ProtoReflect(), src.ProtoReflect(), strings.Split(p, ".")); err != nil {
			return invalidf("update_mask path %q: %v", p, err)
		}
	}
	return nil
}

func copyPath(dst, src protoreflect.Message, parts []string) error {
	fd := dst.Descriptor().Fields().ByName(protoreflect.Name(parts[0]))
	if fd == nil {
		return fmt.Errorf("no field %q in %s", parts[0], dst.Descriptor().FullName())
	}
	if len(parts) == 1 {
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		} else {
			dst.Clear(fd)
		}
		return nil
	}
	if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
		return fmt.Errorf("field %q has no subfields", parts[0])
	}
	return copyPath(dst.Mutable(fd).Message(), src.Get(fd).Message(), parts[1:])
}

// backoff returns the delay before the retry that follows the failed
// attempt number n (1 for the first attempt), as documented for
// RetryConfig.max_doublings: min_backoff doubled for each of the first
// max_doublings retries, then growing linearly by min_backoff·2^max_doublings,
// capped at max_backoff. With min 10s, max 300s and 3 doublings the retries
// come after 10s, 20s, 40s, 80s, 160s, 240s, 300s, 300s, ….
func backoff(rc *pb.RetryConfig, n int32) time.Duration {
	minB, maxB := rc.MinBackoff.AsDuration(), rc.MaxBackoff.AsDuration()
	k := int64(n) - 1 // retries already scheduled before this one
	if k < 0 {
		k = 0
	}
	d := int64(rc.MaxDoublings)
	var f float64
	if k <= d {
		f = float64(minB) * math.Pow(2, float64(k))
	} else {
		f = float64(minB) * math.Pow(2, float64(d)) * float64(k-d+1)
	}
	if f >= float64(maxB) {
		return maxB
	}
	return time.Duration(f)
}

// retryAllowed reports whether a task whose attempt number n just failed may
// be attempted again. Per RetryConfig, retrying stops only once every
// configured limit is reached: max_attempts (unless -1, unlimited) and
// max_retry_duration since the first attempt (unless 0, unlimited). With
// both unlimited the task is retried until maxTaskRetention.
func retryAllowed(rc *pb.RetryConfig, n int32, sinceFirst time.Duration) bool {
	attemptsLimited := rc.MaxAttempts != -1
	mrd := rc.MaxRetryDuration.AsDuration()
	durationLimited := mrd > 0
	attemptsDone := attemptsLimited && n >= rc.MaxAttempts
	durationDone := durationLimited && sinceFirst >= mrd
	switch {
	case attemptsLimited && durationLimited:
		return !(attemptsDone && durationDone)
	case attemptsLimited:
		return !attemptsDone
	case durationLimited:
		return !durationDone
	default:
		return true
	}
}

// checkTaskURL validates an HttpRequest URL.
func checkTaskURL(raw string) error {
	if len(raw) > 2083 {
		return invalidf("http_request.url is longer than 2083 characters")
	}
	if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
		return invalidf("http_request.url must begin with http:// or https://, got %q", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return invalidf("http_request.url: %v", err)
	}
	if u.Host == "" {
		return invalidf("http_request.url %q has no host", raw)
	}
	return nil
}

// applyURIOverride rewrites a task URL per a queue's uri_override.
func applyURIOverride(raw string, o *pb.UriOverride) (string, error) {
	if o == nil {
		return raw, nil
	}
	if o.UriOverrideEnforceMode == pb.UriOverride_IF_NOT_EXISTS && raw != "" {
		return raw, nil
	}
	u := &url.URL{Scheme: "https"}
	if raw != "" {
		var err error
		if u, err = url.Parse(raw); err != nil {
			return "", fmt.Errorf("parse task url: %w", err)
		}
	}
	if o.Scheme != nil {
		switch *o.Scheme {
		case pb.UriOverride_HTTP:
			u.Scheme = "http"
		case pb.UriOverride_HTTPS:
			u.Scheme = "https"
		}
	}
	host, port := u.Hostname(), u.Port()
	if o.Host != nil {
		host = *o.Host
	}
	if o.Port != nil {
		port = ""
		if *o.Port > 0 {
			port = fmt.Sprint(*o.Port)
		}
	}
	u.Host = host
	if port != "" {
		u.Host = host + ":" + port
	}
	if o.PathOverride != nil {
		u.Path, u.RawPath = o.PathOverride.Path, ""
	}
	if o.QueryOverride != nil {
		u.RawQuery = o.QueryOverride.QueryParams
	}
	if u.Host == "" {
		return "", fmt.Errorf("%w: task url has no host after uri_override", errInvalidArgument)
	}
	return u.String(), nil
}

func truncateDuration(d, unit time.Duration) *durationpb.Duration {
	return durationpb.New(d.Truncate(unit))
}
