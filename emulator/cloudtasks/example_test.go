package cloudtasks_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	cloudtasksapi "cloud.google.com/go/cloudtasks/apiv2"
	pb "cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/servo-dev/servo/emulator/cloudtasks"
)

// A program written only against the official client sees its task pushed
// to its worker.
func Example() {
	delivered := make(chan string, 1)
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		delivered <- fmt.Sprintf("%s %s from queue %s: %s", r.Method, r.URL.Path, r.Header.Get("X-CloudTasks-QueueName"), body)
	}))
	defer worker.Close()

	srv := cloudtasks.NewServer(cloudtasks.Options{})
	addr, err := srv.Start("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	ctx := context.Background()
	client, err := cloudtasksapi.NewClient(ctx, cloudtasks.ClientOptions(addr)...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	parent := "projects/my-project/locations/us-central1"
	queue, err := client.CreateQueue(ctx, &pb.CreateQueueRequest{Parent: parent, Queue: &pb.Queue{Name: parent + "/queues/emails"}})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.CreateTask(ctx, &pb.CreateTaskRequest{Parent: queue.Name, Task: &pb.Task{
		MessageType: &pb.Task_HttpRequest{HttpRequest: &pb.HttpRequest{Url: worker.URL + "/send", Body: []byte("hello")}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-delivered)
	// Output: POST /send from queue emails: hello
}
