package store

import (
	"context"
	"fmt"
	"io"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/servo-dev/servo/internal/task"
)

// getDoc reads one document outside a transaction.
func (s *Store) getDoc(ctx context.Context, name string, out any) (bool, error) {
	docs, _, err := s.batchGet(ctx, []string{name}, nil)
	if err != nil {
		return false, err
	}
	if docs[name] == nil {
		return false, nil
	}
	return true, decodeFields(docs[name].GetFields(), out)
}

// batchGet reads documents in one RPC. With sel it runs inside (or begins)
// a transaction and returns the transaction id.
func (s *Store) batchGet(ctx context.Context, names []string, sel any) (map[string]*pb.Document, []byte, error) {
	return s.batchGetMasked(ctx, names, nil, sel)
}

// batchGetMasked is batchGet returning only the fields mask names (all
// when mask is nil).
func (s *Store) batchGetMasked(ctx context.Context, names, mask []string, sel any) (map[string]*pb.Document, []byte, error) {
	req := &pb.BatchGetDocumentsRequest{Database: s.db, Documents: names}
	if mask != nil {
		req.Mask = &pb.DocumentMask{FieldPaths: mask}
	}
	switch v := sel.(type) {
	case *pb.BatchGetDocumentsRequest_NewTransaction:
		req.ConsistencySelector = v
	case *pb.BatchGetDocumentsRequest_Transaction:
		req.ConsistencySelector = v
	}
	stream, err := s.client.BatchGetDocuments(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]*pb.Document, len(names))
	var tx []byte
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, tx, err
		}
		if len(res.GetTransaction()) > 0 {
			tx = res.GetTransaction()
		}
		if d := res.GetFound(); d != nil {
			out[d.GetName()] = d
		}
	}
	return out, tx, nil
}

// GetTask reads a task document without its attempts (1 RPC).
func (s *Store) GetTask(ctx context.Context, id string) (task.Task, error) {
	name := s.taskName(id)
	docs, _, err := s.batchGet(ctx, []string{name}, nil)
	if err != nil {
		return task.Task{}, wrap("get task", err)
	}
	d := docs[name]
	if d == nil {
		return task.Task{}, ErrNotFound
	}
	var t task.Task
	if err := decodeFields(d.GetFields(), &t); err != nil {
		return task.Task{}, fmt.Errorf("store: get task %s: %w", id, err)
	}
	return t, nil
}

// Get reads a task with its attempts, oldest first (2 RPCs; 1 for a task
// whose only attempt has no record document: AttemptsOf).
func (s *Store) Get(ctx context.Context, id string) (task.Task, error) {
	t, err := s.GetTask(ctx, id)
	if err != nil {
		return t, err
	}
	t.Attempts, err = s.AttemptsOf(ctx, &t)
	return t, err
}

// AttemptsOf reads the attempts of task t (as read, or as a transition
// left it), oldest first, as Get shows them: the records with t's live
// state laid over them, the ended last attempt t keeps (task.Task.Ended),
// and the first attempt from t while it has no record (firstAttempt). A
// task that says it has no record document (its first attempt, none
// written) costs no read.
func (s *Store) AttemptsOf(ctx context.Context, t *task.Task) ([]task.Attempt, error) {
	var out []task.Attempt
	if t.Attempt > 1 || t.Recorded == nil || *t.Recorded {
		var err error
		if out, err = s.records(ctx, t.ID); err != nil {
			return nil, err
		}
	}
	if e := t.Ended; e != nil && (len(out) == 0 || out[len(out)-1].Attempt < e.Attempt) {
		out = append(out, *e)
	}
	if len(out) == 0 || out[len(out)-1].Attempt < t.Attempt {
		if a := firstAttempt(t); a != nil {
			out = append(out, *a)
		}
	}
	for i := range out {
		overlay(&out[i], t.Live)
	}
	return out, nil
}

// Attempts reads a task's attempts, oldest first: its document, then
// AttemptsOf it. An ended task's are complete (the dead letters read them).
func (s *Store) Attempts(ctx context.Context, id string) ([]task.Attempt, error) {
	t, err := s.GetTask(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.AttemptsOf(ctx, &t)
}

// records reads a task's attempt record documents, oldest first.
func (s *Store) records(ctx context.Context, id string) ([]task.Attempt, error) {
	return s.attempts(ctx, s.taskName(id))
}

// attempts reads the attempt records under the task document base.
func (s *Store) attempts(ctx context.Context, base string) ([]task.Attempt, error) {
	q := attemptsQuery()
	var out []task.Attempt
	err := s.runQuery(ctx, base, q, func(d *pb.Document) error {
		var a task.Attempt
		if err := decodeFields(d.GetFields(), &a); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, wrap("attempts", err)
}

// attemptsQuery reads a task's attempt records in order.
func attemptsQuery() *pb.StructuredQuery {
	return &pb.StructuredQuery{
		From:    []*pb.StructuredQuery_CollectionSelector{{CollectionId: AttemptsCollection}},
		OrderBy: []*pb.StructuredQuery_Order{{Field: fieldRef("attempt"), Direction: pb.StructuredQuery_ASCENDING}},
	}
}

func (s *Store) runQuery(ctx context.Context, parent string, q *pb.StructuredQuery, each func(*pb.Document) error) error {
	stream, err := s.client.RunQuery(ctx, &pb.RunQueryRequest{Parent: parent, QueryType: &pb.RunQueryRequest_StructuredQuery{StructuredQuery: q}})
	if err != nil {
		return err
	}
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if d := res.GetDocument(); d != nil {
			if err := each(d); err != nil {
				return err
			}
		}
	}
}

// queryTasks runs a query over the tasks collection.
func (s *Store) queryTasks(ctx context.Context, q *pb.StructuredQuery) ([]task.Task, error) {
	var out []task.Task
	err := s.runQuery(ctx, s.docs, q, func(d *pb.Document) error {
		var t task.Task
		if err := decodeFields(d.GetFields(), &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	return out, err
}
