package queue_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/queue"
)

// SendCertificate is a job's arguments: JSON, with a kind.
type SendCertificate struct {
	Learner string `json:"learner"`
	Course  string `json:"course"`
}

func (SendCertificate) Kind() string { return "send_certificate" }

// The seed's certificate queue: a handler whose business write and whose
// completion commit together, fenced by the job's token.
func Example() {
	ctx := context.Background()
	pool, drop := examplePool(ctx) // a pool on a schema of its own
	defer drop()
	if err := queue.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE certificate (learner text, course text, token bigint, PRIMARY KEY (learner, course))`); err != nil {
		fmt.Println(err)
		return
	}

	done := make(chan string, 1)
	workers := queue.NewWorkers()
	queue.AddWorker(workers, queue.WorkFunc[SendCertificate](func(ctx context.Context, job *queue.Job[SendCertificate]) error {
		// The slow part (render the PDF) runs outside any transaction...
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// ...then the row and the job's completion commit together. If
			// the job was reclaimed meanwhile, CompleteTx fails with
			// aegis.ErrStale and the row is rolled back.
			_, err := tx.Exec(ctx, `INSERT INTO certificate VALUES ($1, $2, $3)
				ON CONFLICT (learner, course) DO UPDATE SET token = excluded.token`, job.Args.Learner, job.Args.Course, int64(job.Token))
			if err != nil {
				return err
			}
			if err := job.CompleteTx(ctx, tx); err != nil {
				return err
			}
			done <- fmt.Sprintf("certificate for %s, attempt %d, token %d", job.Args.Learner, job.Attempt, job.Token)
			return nil
		})
	}))

	c, err := queue.New(pool, &queue.Config{
		Queues:  map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 10}},
		Workers: workers,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := c.Enqueue(ctx, SendCertificate{Learner: "ada", Course: "system-design"}, &queue.EnqueueOpts{
		UniqueKey: "certificate/ada/system-design", // while it is live, enqueuing it again returns this job
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	again, _ := c.Enqueue(ctx, SendCertificate{Learner: "ada", Course: "system-design"}, &queue.EnqueueOpts{
		UniqueKey: "certificate/ada/system-design",
	})
	fmt.Println("enqueued:", res.Job.Kind, "duplicate:", again.Duplicate)

	if err := c.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer c.Stop(ctx)
	select {
	case line := <-done:
		fmt.Println(line)
	case <-time.After(30 * time.Second):
		fmt.Println("the job did not run within 30s")
	}
	// Output:
	// enqueued: send_certificate duplicate: true
	// certificate for ada, attempt 1, token 1
}

// A handler fences its own side effects with the job's token: a worker
// whose job was reclaimed and given to another has a lower token, and the
// fence rejects its write.
func ExampleJobRow_Token() {
	ctx := context.Background()
	pool, drop := examplePool(ctx)
	defer drop()
	if err := fence.Migrate(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	write := func(job *queue.JobRow) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return fence.Check(ctx, tx, fmt.Sprintf("job/%d", job.ID), job.Token)
		})
	}
	// Two holders of job 7 in turn: the first paused past its lease, the
	// second got the job from the reaper with a greater token.
	second := &queue.JobRow{ID: 7, Token: 3}
	first := &queue.JobRow{ID: 7, Token: 1}
	fmt.Println("second:", write(second))
	fmt.Println("first rejected:", errors.Is(write(first), aegis.ErrStale))
	// Output:
	// second: <nil>
	// first rejected: true
}

// examplePool returns a pool on a new schema of the test PostgreSQL and a
// function that drops the schema.
func examplePool(ctx context.Context) (*pgxpool.Pool, func()) {
	url := cmp.Or(os.Getenv("AEGIS_POSTGRES_URL"), "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable")
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		panic(fmt.Sprintf("the example needs the test PostgreSQL (scripts/services start): %v", err))
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(ctx)
	}
}
