// Package schedule turns a durable schedule's spec (a five-field cron in
// a time zone, or a fixed interval, bounded by a start and an end) into
// fire times, and each fire into its jitter.
//
// The package is pure: no clocks (callers pass the time in), no
// randomness, so that every process computes the same fires. Fires are in
// UTC at millisecond precision. Around daylight-saving changes a cron
// follows Vixie cron: a wall time skipped by spring forward does not fire
// that day, and a wall time repeated by fall back fires once, unless the
// hour field is "*" (as in "*/15 * * * *" or @hourly), which keeps firing
// at every real occurrence.
package schedule
