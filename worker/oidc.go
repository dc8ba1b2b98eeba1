package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/api/idtoken"
)

// Issuers of Google-signed OIDC tokens.
var googleIssuers = []string{"https://accounts.google.com", "accounts.google.com"}

// verifyOIDC checks the delivery's bearer token: Google's signature, the
// issuer, the audience and, if configured, the service account email.
func (h *handler) verifyOIDC(ctx context.Context, r *http.Request) error {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return errors.New("no bearer token")
	}
	tok = strings.TrimSpace(tok)
	var (
		p   *idtoken.Payload
		err error
	)
	if v := h.cfg.oidcValidator; v != nil {
		p, err = v.Validate(ctx, tok, h.cfg.oidcAudience)
	} else {
		p, err = idtoken.Validate(ctx, tok, h.cfg.oidcAudience)
	}
	if err != nil {
		return err
	}
	if !slices.Contains(googleIssuers, p.Issuer) {
		return fmt.Errorf("issuer %q is not Google's", p.Issuer)
	}
	if len(h.cfg.oidcEmails) > 0 {
		email, _ := p.Claims["email"].(string)
		verified, _ := p.Claims["email_verified"].(bool)
		if !verified || !slices.Contains(h.cfg.oidcEmails, email) {
			return fmt.Errorf("token email %q is not an allowed service account", email)
		}
	}
	return nil
}
