// Package auth is Servo's identity and authorisation: who the control
// API's callers are and what each may do on which tenant's tasks, and the
// task tokens workers present on their callbacks.
//
// # Callers
//
// The control API (package dispatcher) learns its caller from the identity
// token in Authorization: Bearer. [Policy.Authenticate] verifies it with
// [IdentityVerifier]s: [GoogleVerifier] in production (the Google ID
// token Cloud Functions' IAM already checked, verified again with
// google.golang.org/api/idtoken; its e-mail must be verified; its audience
// SERVO_API_AUDIENCE when set), [DevVerifier] under servo dev. A request
// without a token is let in, as the anonymous caller "", only by the open
// policy. [Policy.Check] then refuses an action the caller's role does not
// allow with a [PermissionError]. The caller's e-mail travels in the
// request's context ([WithPrincipal], [Principal]). A pull pool's workers
// present Google ID tokens to the claim function (package pull), verified
// by [GoogleVerifier] as well.
//
// # Access policy
//
// A [Policy] says which principal (the verified e-mail of the caller's
// identity token, or [Wildcard] for any authenticated caller) may do what
// on which tenant's tasks. Roles are cumulative, per tenant or for every
// tenant ([Wildcard]):
//
//	viewer     get, list, counts, events, runs, usage
//	submitter  viewer + submit
//	operator   submitter + cancel, rerun
//
// [ParsePolicy], [LoadPolicy] (SERVO_ACCESS or SERVO_ACCESS_FILE) and
// [ReadPolicyFile] (servo dev --access) read
//
//	{"principals": {"EMAIL or *": {"TENANT or *": "viewer|submitter|operator"}}}
//
// Unknown fields, roles and empty names are [ErrInvalidPolicy]; e-mails
// are compared case-insensitively. [OpenPolicy] and the nil *Policy allow
// everything: the control API is then protected by IAM alone.
// [Policy.Allows] answers one request; [Policy.Tenants] says on which
// tenants a principal may act, all of them or the list a query filters on.
// The policy is pure: the control API (package dispatcher) authenticates
// the caller and asks it. See docs/tenants.md.
//
// # Dev identity tokens
//
// `servo --as EMAIL` acts as a principal against the local stack: each
// servo dev run generates a key ([NewDevKey]) and prints it as
// SERVO_DEV_IDENTITY_KEY ([DevKeyEnv]); the CLI signs a token with it
// ([SignDev]: HS256, issuer [DevIssuer], audience [DevAudience]) and the
// local control API accepts it ([VerifyDev]). The deployed API is never
// given a dev key, so it never accepts one.
//
// # Task tokens
//
// A task token is the bearer credential a worker presents on every callback
// (docs/contract.md §3). It is an HS256 JWT whose claims scope it to
// exactly one attempt of one task ([Scope]): tenantId, workspaceId, runId,
// taskId and attempt, plus the registered claims iss ([TaskTokenIssuer]),
// iat, nbf, exp and a random jti.
//
// Keys live in a [KeyRing] keyed by kid. The active key signs; every listed
// key verifies, selected by the token's kid header, so a key is rotated by
// first adding the new key as active while the old one stays listed, then
// removing the old key once every token it signed has expired: at most
// [MaxTaskTokenTTL] after its nbf, which for a retry scheduled ahead
// ([KeyRing.SignFrom]) is that retry's delivery time, so up to the longest
// retry backoff plus MaxTaskTokenTTL after signing.
//
// A [Ring] is the stored form of a key ring with each key's history
// (created, activated, deactivated); [AddKey], [Activate] and [Retire] are
// the rotation steps as pure functions, and Retire refuses a key that may
// still have signed a valid token ([RetireGrace]). A ring from
// [NewReloadingKeyRing] or [OpenKeyRing] re-reads its [RingSource] (a file,
// a Secret Manager secret) when a token names an unknown kid and every
// [DefaultRefresh], so running processes follow a rotation. Package
// keysecret (internal/auth/keysecret) reads and writes the ring in a Secret
// Manager secret; it is kept apart so that only the programs that use it
// link the Secret Manager client.
//
// Verification accepts HS256 only and rejects a wrong or unknown key, a
// missing claim, a wrong issuer, a token not yet valid and an expired token
// (with a [TaskTokenLeeway] of a few seconds for clock skew). Every
// rejection wraps [ErrInvalidTaskToken] or [ErrTaskTokenExpired]; error
// texts never contain the token or any key material, so they are safe to
// log and to return to callers.
package auth
