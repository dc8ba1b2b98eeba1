package servotest

import (
	"context"
	"io"

	firestoreapi "cloud.google.com/go/firestore/apiv1"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// FirestoreClient returns a low-level Firestore client for the emulator at
// host, authenticated as the emulator's owner (as the store is, so that
// security rules do not apply), for tests and benchmarks that write or
// time documents below the store.
func FirestoreClient(ctx context.Context, host string) (*firestoreapi.Client, error) {
	return firestoreapi.NewClient(ctx, option.WithEndpoint(host), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithPerRPCCredentials(ownerCreds{})))
}

// ownerCreds authenticates to the Firestore emulator as its owner.
type ownerCreds struct{}

func (ownerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}
func (ownerCreds) RequireTransportSecurity() bool { return false }

// ReadCommit is one bare read-write transaction, the least a heartbeat
// needs: doc read (through mask, when not nil) by a BatchGetDocuments that
// begins the transaction, then w committed in it.
func ReadCommit(ctx context.Context, fs *firestoreapi.Client, db, doc string, mask []string, w *pb.Write) error {
	req := &pb.BatchGetDocumentsRequest{
		Database: db, Documents: []string{doc},
		ConsistencySelector: &pb.BatchGetDocumentsRequest_NewTransaction{NewTransaction: &pb.TransactionOptions{
			Mode: &pb.TransactionOptions_ReadWrite_{ReadWrite: &pb.TransactionOptions_ReadWrite{}}}},
	}
	if mask != nil {
		req.Mask = &pb.DocumentMask{FieldPaths: mask}
	}
	stream, err := fs.BatchGetDocuments(ctx, req)
	if err != nil {
		return err
	}
	var tx []byte
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if t := res.GetTransaction(); len(t) > 0 {
			tx = t
		}
	}
	_, err = fs.Commit(ctx, &pb.CommitRequest{Database: db, Transaction: tx, Writes: []*pb.Write{w}})
	return err
}
