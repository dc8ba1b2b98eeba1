// Package quota is Servo's per-tenant and per-worker concurrency limits
// (docs/tenants.md), all of them: the policy read from configuration
// (policy.go), the counter shards that enforce it in Firestore
// (counters.go), the admission of a task at submit and of a waiting task
// when a run slot frees (admission.go), the sweeper's one quota duty
// (duty.go: the counter repair, repair.go, then the admission of waiting
// tasks in fair order, sweep.go), and what quota needs of the store
// (firestore.go: Tx, DB; DutyStore). Two hooks stay where the contract
// puts them: the state machine's quota steps (internal/task's quota.go:
// every transition goes through the one machine) and the store's commit
// of them (internal/store's quota.go: every write goes through Apply).
//
// # Counter shards
//
// A limited scope (a tenant or a worker with a limit in the Policy) keeps
// its counts in a few counter documents, quotas/{scope}-{k}, each holding
// the queued and running counts of the tasks admitted on shard k and
// owning a share of each limit (Share): a submit reads one shard per scope
// (at most MaxProbes more only when its own is full), so that concurrent
// submits and completions spread over the shards instead of queueing on
// one document, and no limit is ever exceeded. A scope has the policy's
// Shards (default 4) or, when it declares a PeakRate, enough shards that
// none takes more than about one write a second at that rate, capped so
// that each owns at least MinShare of each limit (Policy.ShardsFor). What a task adds to the counters is a
// pure function of the task (Counts); every change of it is written by the
// commit of the transition that changes it (Counters.Writes: increment
// transforms, no read), and the sweeper recounts the shards and repairs
// any that drifted (Counters.Repair).
//
// # The store's side
//
// Quota owns its documents (their names, fields and the queries over
// them) but no connection: the store runs every transaction and every RPC,
// and calls into quota at four points. At submit, in the transaction that
// creates a task of a limited scope (store.CreateMany), the store's first
// read takes the shards an Admission names (with the task's idempotency
// record: one RPC) and the Admission decides the task's hold. In
// store.Apply, before the state machine runs an admit event, FreeSlots
// finds a run slot; after it, Writes gives the counter updates the store
// adds to the transition's commit. Outside transactions, Usage and Repair
// read and rewrite shards through DB.
//
// The store speaks Firestore's RPC API (firestorepb) itself, so that a
// transaction begins on its first read and a transition costs two RPCs:
// there is no *firestore.Transaction to hand to quota. Quota therefore
// reads through Tx, the store's transaction in progress, and never writes
// through it: it returns its writes, and the store commits them with the
// transition's own. A transition and its counter updates stay one
// transaction and one commit, and quota neither begins, commits, retries
// nor rolls back one.
//
// Quota depends on package task (tasks' states and their QuotaHold) and on
// nothing above it; the state machine's quota steps (the QUOTA_WAIT
// transition at creation and the ADMIT event) stay in task, which does not
// import quota.
package quota
