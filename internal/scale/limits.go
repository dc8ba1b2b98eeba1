package scale

import "slices"

// Limit is a published limit the model checks a rate against.
type Limit struct {
	// Name says what is limited.
	Name string
	// PerSecond is the limit in the row's unit a second.
	PerSecond float64
	// Source is where Google publishes it, Read when it was read there.
	Source, Read string
}

// The limits the table checks (Limits lists them).
var (
	// DocumentWrites: Firestore's sustained write rate to one document.
	DocumentWrites = Limit{Name: "Firestore: sustained writes to one document", PerSecond: 1,
		Source: "https://web.archive.org/web/20190411040400/https://firebase.google.com/docs/firestore/quotas (\"Maximum write rate to a document: 1 per second\"; the current https://cloud.google.com/firestore/quotas no longer lists it, only its soft limit of 500 writes a second into sequential indexed values, so the figure is kept as the conservative one); https://cloud.google.com/firestore/docs/best-practices (hotspots)", Read: "2026-11-28"}
	// SequentialIndex: writes into one range of sequential index values
	// (a monotonically increasing or decreasing indexed field, or
	// sequential document ids).
	SequentialIndex = Limit{Name: "Firestore: writes into one range of sequential index values", PerSecond: 500,
		Source: "https://cloud.google.com/firestore/quotas (soft limit: \"Maximum write rate to a collection in which documents contain sequential values in an indexed field: 500 per second\"); https://firebase.google.com/docs/firestore/solutions/shard-timestamp; https://cloud.google.com/firestore/docs/best-practices (\"do not use monotonically increasing document IDs\")", Read: "2026-11-28"}
	// QueueDispatches: a Cloud Tasks queue's maximum dispatch rate.
	QueueDispatches = Limit{Name: "Cloud Tasks: max_dispatches_per_second of one queue", PerSecond: 500,
		Source: "https://cloud.google.com/tasks/docs/reference/rpc/google.cloud.tasks.v2#ratelimits (\"The maximum allowed value is 500\")", Read: "2026-11-26"}
	// OrderingKeyBytes: Pub/Sub publish throughput of one ordering key.
	OrderingKeyBytes = Limit{Name: "Pub/Sub: publish throughput of one ordering key", PerSecond: 1_000_000,
		Source: "https://cloud.google.com/pubsub/quotas (\"If messages have ordering keys, the maximum publisher throughput is 1 MB/s per ordering key\")", Read: "2026-11-26"}
	// TopicBytes: Pub/Sub's default publisher throughput quota of a large
	// region (europe-west1, us-central1, us-east1; a project's, all topics
	// together; soft: it can be raised), in quota bytes (QuotaBytes).
	TopicBytes = Limit{Name: "Pub/Sub: publisher throughput per large region, default quota", PerSecond: 200_000_000,
		Source: "https://cloud.google.com/pubsub/quotas (publisher throughput per region: 12,000,000 kB a minute, 200 MB/s, in the large regions europe-west1, us-central1, us-east1; soft; a request counts at least 1 kB)", Read: "2026-11-28"}
	// TopicBytesSmall is TopicBytes in every other region.
	TopicBytesSmall = Limit{Name: "Pub/Sub: publisher throughput per small region, default quota", PerSecond: 50_000_000,
		Source: "https://cloud.google.com/pubsub/quotas (publisher throughput per region: 3,000,000 kB a minute, 50 MB/s, in small regions: all but europe-west1, us-central1, us-east1; soft)", Read: "2026-11-28"}
)

// LargeRegions are Pub/Sub's large regions, whose default publisher
// throughput quota is TopicBytes; every other region's is
// TopicBytesSmall.
var LargeRegions = []string{"europe-west1", "us-central1", "us-east1"}

// TopicLimit is the publisher throughput quota of region ("" is
// us-central1, Terraform's default region).
func TopicLimit(region string) Limit {
	if region == "" || slices.Contains(LargeRegions, region) {
		return TopicBytes
	}
	return TopicBytesSmall
}

// QuotaBytes is what a published message of n bytes counts against the
// publisher throughput quota, sent alone in its request (the model's
// bound: Servo publishes each event as it commits, and a batch of several
// would count less): the request's size rounded up to a whole kB, at
// least 1 kB.
func QuotaBytes(n int) int { return max(1, (n+999)/1000) * 1000 }

// Limits are every limit the model checks.
var Limits = []Limit{DocumentWrites, SequentialIndex, QueueDispatches, OrderingKeyBytes, TopicBytes, TopicBytesSmall}
