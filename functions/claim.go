package functions

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/internal/config"
	"github.com/servo-dev/servo/internal/server"
)

func init() { functions.HTTP("ServoClaim", ServoClaim) }

var claimEntry = newEntry("ServoClaim", func(ctx context.Context, s *server.Server) (http.Handler, error) {
	if s.Claim == nil {
		return nil, fmt.Errorf("functions: %w: set %s to the ServoClaim URL (the audience of the callers' ID tokens)", server.ErrMisconfigured, config.EnvClaimAudience)
	}
	return s.Claim, nil
}, "application/json", true, func(err error) any {
	return api.ClaimResponse{
		Disposition: api.Retry, ServerTime: time.Now().UTC(), Error: server.FailureCode(err),
		Message: "the claim service is not configured or cannot reach its dependencies; retry",
	}
})

// ServoClaim is the pull pools' claim function (HTTP): POST
// /v1/pools/{pool}/claim, served by the Server's claim handler. Its
// invoker role is granted only to the pools' service accounts (Terraform),
// and the handler verifies the caller's Google ID token (audience
// SERVO_CLAIM_AUDIENCE, the function's URL) and checks its e-mail against
// the pool's serviceAccounts. The local stack's identity header is never
// accepted here. When the handler cannot be built it answers 503
// unavailable, disposition RETRY, with a Retry-After.
func ServoClaim(w http.ResponseWriter, r *http.Request) { claimEntry.ServeHTTP(w, r) }
