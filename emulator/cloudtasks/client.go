package cloudtasks

import (
	"context"
	"fmt"
	"os"
	"strings"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// EnvVar names the environment variable that points Cloud Tasks clients at
// an emulator, as host:port.
const EnvVar = "CLOUD_TASKS_EMULATOR_HOST"

// ClientOptions returns the options that make the official Cloud Tasks
// client talk to an emulator at hostPort: that endpoint, plaintext gRPC and
// no credentials.
func ClientOptions(hostPort string) []option.ClientOption {
	hostPort = strings.TrimPrefix(strings.TrimPrefix(hostPort, "http://"), "dns:///")
	return []option.ClientOption{
		option.WithEndpoint(hostPort),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithTelemetryDisabled(),
	}
}

// NewClient builds a Cloud Tasks client for a program that may run against
// the emulator (the local stack, tests). When CLOUD_TASKS_EMULATOR_HOST is
// set it dials that address with insecure gRPC and no authentication, like
// the official clients do for their emulators (the emulator options come
// last, so they win over opts); otherwise it returns
// cloudtasks.NewClient(ctx, opts...).
func NewClient(ctx context.Context, opts ...option.ClientOption) (*cloudtasksapi.Client, error) {
	if host := os.Getenv(EnvVar); host != "" {
		opts = append(opts, ClientOptions(host)...)
	}
	c, err := cloudtasksapi.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("cloudtasks: new client: %w", err)
	}
	return c, nil
}
