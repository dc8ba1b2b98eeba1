// Package keysecret keeps the task-token key ring (its stored form,
// [auth.Ring]) in a Secret Manager secret: it reads the secret's latest
// version and adds a new version, through the Secret Manager REST API with
// Application Default Credentials. Functions re-read the ring through
// Source (SERVO_TOKEN_KEYS_SECRET); `servo keys --secret` writes it.
//
// It is a package of its own so that the Secret Manager client is linked
// only by the programs that read or write the secret (functions, servo),
// not by every package that signs or verifies task tokens.
package keysecret

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"sync"

	"google.golang.org/api/option"
	secretmanager "google.golang.org/api/secretmanager/v1"

	"github.com/servo-dev/servo/internal/auth"
)

// secretName is projects/P/secrets/S.
var secretName = regexp.MustCompile(`^projects/[^/]+/secrets/[^/]+$`)

// CheckName returns an error unless name is projects/P/secrets/S.
func CheckName(name string) error {
	if !secretName.MatchString(name) {
		return fmt.Errorf("keysecret: secret %q: want projects/PROJECT/secrets/SECRET", name)
	}
	return nil
}

// Client reads and writes one secret. Its Secret Manager service is
// created on first use, so creating a Client makes no network call.
type Client struct {
	name string
	opts []option.ClientOption

	once sync.Once
	svc  *secretmanager.Service
	err  error
}

// New returns a Client for the secret name (projects/P/secrets/S); opts
// are passed to the Secret Manager service (an endpoint, in tests).
func New(name string, opts ...option.ClientOption) (*Client, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	return &Client{name: name, opts: opts}, nil
}

func (c *Client) service(ctx context.Context) (*secretmanager.Service, error) {
	c.once.Do(func() {
		c.svc, c.err = secretmanager.NewService(context.WithoutCancel(ctx), c.opts...)
		if c.err != nil {
			c.err = fmt.Errorf("keysecret: secret manager client: %w", c.err)
		}
	})
	return c.svc, c.err
}

// Latest returns the data of the secret's latest version.
func (c *Client) Latest(ctx context.Context) ([]byte, error) {
	svc, err := c.service(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := svc.Projects.Secrets.Versions.Access(c.name + "/versions/latest").Context(ctx).Do()
	if err != nil {
		return nil, fmt.Errorf("keysecret: read %s: %w", c.name, err)
	}
	if resp.Payload == nil {
		return nil, fmt.Errorf("keysecret: read %s: empty payload", c.name)
	}
	data, err := base64.StdEncoding.DecodeString(resp.Payload.Data)
	if err != nil {
		return nil, fmt.Errorf("keysecret: read %s: payload: %w", c.name, err)
	}
	return data, nil
}

// Add adds data as the secret's new version and returns its name.
func (c *Client) Add(ctx context.Context, data []byte) (string, error) {
	svc, err := c.service(ctx)
	if err != nil {
		return "", err
	}
	v, err := svc.Projects.Secrets.AddVersion(c.name, &secretmanager.AddSecretVersionRequest{
		Payload: &secretmanager.SecretPayload{Data: base64.StdEncoding.EncodeToString(data)},
	}).Context(ctx).Do()
	if err != nil {
		return "", fmt.Errorf("keysecret: add a version to %s: %w", c.name, err)
	}
	return v.Name, nil
}

// Source returns an [auth.RingSource] reading the latest version of the secret
// name, for [auth.OpenKeyRing]. A bad name fails on the first read.
func Source(name string, opts ...option.ClientOption) auth.RingSource {
	c, err := New(name, opts...)
	if err != nil {
		return func(context.Context) ([]byte, error) { return nil, err }
	}
	return c.Latest
}
