// Package token issues and verifies Servo task tokens.
//
// A task token is the bearer credential a worker presents on every callback
// (ADR-023 §2, PRODUCT.md §4). It is an HS256 JWT whose claims scope it to
// exactly one attempt of one task: tenantId, workspaceId, runId, taskId and
// attempt, plus the registered claims iss ("servo"), iat, nbf, exp and a
// random jti.
//
// Keys live in a [KeyRing] keyed by kid. The active key signs; every listed
// key verifies, selected by the token's kid header, so a key is rotated by
// first adding the new key as active while the old one stays listed, then
// removing the old key once every token it signed has expired: at most
// [MaxTTL] after its nbf, which for a retry scheduled ahead
// ([KeyRing.SignFrom]) is that retry's delivery time, so up to the longest
// retry backoff plus MaxTTL after signing.
//
// A [Ring] is the stored form of a key ring with each key's history
// (created, activated, deactivated); [AddKey], [Activate] and [Retire] are
// the rotation steps as pure functions, and Retire refuses a key that may
// still have signed a valid token ([RetireGrace]). A ring from
// [NewReloadingKeyRing] or [OpenKeyRing] re-reads its [Source] (a file, a
// Secret Manager secret) when a token names an unknown kid and every
// [DefaultRefresh], so running processes follow a rotation.
//
// Verification accepts HS256 only and rejects a wrong or unknown key, a
// missing claim, a wrong issuer, a token not yet valid and an expired token
// (with a [Leeway] of a few seconds for clock skew). Every rejection wraps
// [ErrInvalid] or [ErrExpired]; error texts never contain the token or any
// key material, so they are safe to log and to return to callers.
package token
