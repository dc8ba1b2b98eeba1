package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/servo-dev/servo/api"
	"github.com/servo-dev/servo/client"
)

// Submit a task to the local stack (`servo dev`) and read it back.
func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	sub, _, err := c.Submit(ctx, []byte(`{"tenantId":"acme","workspaceId":"ws","taskKey":"report-42",
		"worker":"example","payload":{"partitions":4}}`))
	var ae *api.Error
	if errors.As(err, &ae) {
		log.Fatalf("refused: %d %s (field %q): %s", ae.Status, ae.Code, ae.Field, ae.Message)
	} else if err != nil {
		log.Fatal(err)
	}
	t, _, err := c.Get(ctx, sub.TaskID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.TaskID, t.State, t.Attempt)
}
