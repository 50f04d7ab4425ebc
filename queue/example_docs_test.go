package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/queue"
)

// docs/queue.md's "Using it" on an empty database (certificates' body),
// until the certificate's row has committed.
func Example_certificates() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	dir, err := os.MkdirTemp("", "queue-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	if objects, err = fence.NewDir(dir); err != nil {
		fmt.Println(err)
		return
	}

	ctx, shutdown := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- certificates(ctx, pool) }()
	var key string
	for give := time.Now().Add(30 * time.Second); key == "" && ctx.Err() == nil && time.Now().Before(give); {
		// The row appears when the handler's transaction commits.
		err := pool.QueryRow(ctx, "SELECT object_key FROM certificate WHERE learner = 'ada'").Scan(&key)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Println("certificate:", key)
	shutdown()
	select {
	case err := <-done:
		fmt.Println(err)
	case <-time.After(30 * time.Second):
		fmt.Println("the client did not stop within 30s")
	}
	// Output:
	// certificate: certificates/ada/sd/0000000000000000001.pdf
	// <nil>
}

// certificates is docs/queue.md's usage, as printed there.
func certificates(ctx context.Context, pool *pgxpool.Pool) error {
	if err := queue.Migrate(ctx, pool); err != nil { // numbered migrations, safe to run from every replica
		return err
	}
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS certificate ( -- yours
		learner text, course text, object_key text NOT NULL, PRIMARY KEY (learner, course))`)
	if err != nil {
		return err
	}

	workers := queue.NewWorkers()
	queue.AddWorker(workers, queue.WorkFunc[SendCertificate](func(ctx context.Context, job *queue.Job[SendCertificate]) error {
		// Slow, outside any transaction; the PDF goes under a key that holds
		// the token, so a stale worker's upload is never the canonical one.
		key, err := renderAndUpload(ctx, job.Args, job.Token)
		if err != nil {
			return err // retried with exponential backoff and jitter
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO certificate (learner, course, object_key) VALUES ($1, $2, $3)`,
				job.Args.Learner, job.Args.Course, key)
			if err != nil {
				return err
			}
			return job.CompleteTx(ctx, tx) // fenced; aegis.ErrStale if the job was reclaimed: roll back
		})
	}))

	c, err := queue.New(pool, &queue.Config{
		Queues:  map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 100}},
		Workers: workers,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer c.Stop(context.WithoutCancel(ctx)) // stop claiming, wait for running jobs, then hand leases back
	_, err = c.Enqueue(ctx, SendCertificate{Learner: "ada", Course: "sd"}, &queue.EnqueueOpts{UniqueKey: "cert/ada/sd"})
	if err != nil {
		return err
	}
	<-ctx.Done() // until shutdown
	return nil
}

// objects is where renderAndUpload puts the PDFs (S3 in production).
var objects fence.ObjectStore

// renderAndUpload renders the certificate and uploads it under its token's
// key; the row that names the key is committed through the queue's fence.
func renderAndUpload(ctx context.Context, args SendCertificate, token aegis.Token) (string, error) {
	key, err := fence.TokenKey("certificates/"+args.Learner+"/"+args.Course, token, "pdf")
	if err != nil {
		return "", err
	}
	pdf := fmt.Appendf(nil, "%%PDF-1.7 certificate of %s for %s\n", args.Learner, args.Course)
	if err := objects.Put(ctx, key, bytes.NewReader(pdf)); err != nil {
		return "", err
	}
	return key, nil
}
