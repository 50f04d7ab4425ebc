// Command onepool is a service with one pgx pool and no other database
// handle: every package of Aegis it uses takes that pool, and it opens no
// database/sql bridge of its own.
//
//	export AEGIS_POSTGRES_URL=postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable
//	go run ./examples/onepool
//
// In turn it holds a lease (pglease) and writes the month's report through
// the fence with the lease; enqueues an invoice job (queue) and works it,
// its row and the job's completion in one transaction, fenced by the job's
// token; seeds the catalog with a schedule (schedule, Catalog.Ensure: run
// it again and the schedule stays at version 1), runs its first tick and
// reads the run back (RunReader); and campaigns in an election (elect, on
// the pglease Locker), writing a leader's row fenced by the term's token.
// Each step prints one line; the rows stay in the database.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// node names this process in the rows it writes.
const node = "onepool-1"

// The program's own tables: what each step wrote, and with which token.
const schemaSQL = `
CREATE TABLE IF NOT EXISTS onepool_report (month text PRIMARY KEY, token bigint NOT NULL, node text NOT NULL);
CREATE TABLE IF NOT EXISTS onepool_invoice (customer text PRIMARY KEY, job_id bigint NOT NULL, token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS onepool_reconciliation (fire_at timestamptz PRIMARY KEY, token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS onepool_leader (name text PRIMARY KEY, node text NOT NULL, term bigint NOT NULL)`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("AEGIS_POSTGRES_URL"), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "onepool:", err)
		os.Exit(1)
	}
}

// run does the four steps on a pool of url's database, within a minute.
func run(ctx context.Context, url string, out io.Writer) error {
	if url == "" {
		return errors.New("set AEGIS_POSTGRES_URL to a PostgreSQL URL")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return errors.New("AEGIS_POSTGRES_URL is not a PostgreSQL URL") // pgx's error quotes the URL, password included
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("open a pool: %w", err)
	}
	defer pool.Close() // the pool is the program's: closed last, after everything built on it
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("create the program's tables: %w", err)
	}
	if err := fence.Migrate(ctx, pool); err != nil {
		return err
	}
	locker, err := pglease.New(pool, nil)
	if err != nil {
		return err
	}
	for _, step := range []func(context.Context, *pgxpool.Pool, aegis.Locker, io.Writer) error{lease, work, scheduled, leader} {
		if err := step(ctx, pool, locker, out); err != nil {
			return err
		}
	}
	return nil
}

// lease holds the month's report key and writes the report through the
// fence with the lease.
func lease(ctx context.Context, pool *pgxpool.Pool, locker aegis.Locker, out io.Writer) error {
	const key = "report/2026-10"
	h, err := aegis.Hold(ctx, locker, key, 30*time.Second)
	if err != nil {
		return err
	}
	defer h.Release(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(h.Context(), pool, func(tx pgx.Tx) error {
		if err := fence.CheckLease(h.Context(), tx, key, h.Lease()); err != nil {
			return err // aegis.ErrStale: a newer holder wrote already
		}
		_, err := tx.Exec(h.Context(), `INSERT INTO onepool_report VALUES ('2026-10', $1, $2)
			ON CONFLICT (month) DO UPDATE SET token = excluded.token, node = excluded.node`, int64(h.Lease().Token), node)
		return err
	})
	if err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	fmt.Fprintf(out, "lease: %s held, the report written through the fence with token %d\n", key, h.Lease().Token)
	return nil
}

// SendInvoice is the queue job's arguments.
type SendInvoice struct {
	Customer string `json:"customer"`
}

func (SendInvoice) Kind() string { return "send_invoice" }

// work enqueues an invoice job and works it: the invoice's row and the
// job's completion commit together, fenced by the job's token.
func work(ctx context.Context, pool *pgxpool.Pool, _ aegis.Locker, out io.Writer) error {
	if err := queue.Migrate(ctx, pool); err != nil {
		return err
	}
	done := make(chan *queue.JobRow, 1)
	workers := queue.NewWorkers()
	queue.AddWorker(workers, queue.WorkFunc[SendInvoice](func(ctx context.Context, job *queue.Job[SendInvoice]) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := fence.Check(ctx, tx, fmt.Sprintf("invoice/%s", job.Args.Customer), job.Token); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO onepool_invoice VALUES ($1, $2, $3)
				ON CONFLICT (customer) DO UPDATE SET job_id = excluded.job_id, token = excluded.token`, job.Args.Customer, job.ID, int64(job.Token))
			if err != nil {
				return err
			}
			if err := job.CompleteTx(ctx, tx); err != nil {
				return err
			}
			done <- job.JobRow
			return nil
		})
	}))
	c, err := queue.New(pool, &queue.Config{
		Queues:             map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 2}},
		Workers:            workers,
		CompletedRetention: 24 * time.Hour, // the worked job stays readable (aegis inspect, the console)
	})
	if err != nil {
		return err
	}
	res, err := c.Enqueue(ctx, SendInvoice{Customer: "acme"}, nil)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer c.Stop(context.WithoutCancel(ctx))
	select {
	case job := <-done:
		fmt.Fprintf(out, "queue: job %d (%s) enqueued and worked, attempt %d, token %d\n", job.ID, res.Job.Kind, job.Attempt, job.Token)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("job %d was not worked: %w", res.Job.ID, ctx.Err())
	}
}

// scheduled seeds the catalog, runs the schedule's first tick and reads
// the run back.
func scheduled(ctx context.Context, pool *pgxpool.Pool, _ aegis.Locker, out io.Writer) error {
	store, err := schedule.NewStoreFromPool(ctx, pool, nil) // the run table
	if err != nil {
		return err
	}
	defer store.Close()                                         // its bridge to database/sql, not the pool
	catalog, err := schedule.NewCatalogFromPool(ctx, pool, nil) // the schedules
	if err != nil {
		return err
	}
	defer catalog.Close()
	s, err := schedule.New(&schedule.Config{Node: node, Store: store, Catalog: catalog})
	if err != nil {
		return err
	}
	ran := make(chan schedule.Run, 1)
	err = s.Handle("reconcile", func(ctx context.Context, _ json.RawMessage) error {
		r, _ := schedule.RunFrom(ctx)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := fence.Check(ctx, tx, "reconciliation", r.Token); err != nil {
				return err // aegis.ErrStale: a later run has written
			}
			_, err := tx.Exec(ctx, `INSERT INTO onepool_reconciliation VALUES ($1, $2) ON CONFLICT DO NOTHING`, r.Fire, int64(r.Token))
			return err
		})
		if err == nil {
			select {
			case ran <- r:
			default:
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Stop() // before the store's and the catalog's Close: deferred after them
	// Every replica seeds the catalog at start-up: created once, left
	// alone (no new version) when it is there and equal.
	e, err := catalog.Ensure(ctx, schedule.Entry{Name: "reconciliation", Every: time.Second, Handler: "reconcile"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "schedule: %s ensured at version %d (%s)\n", e.Name, e.Version, e.Spec())
	var r schedule.Run
	select {
	case r = <-ran:
	case <-ctx.Done():
		return fmt.Errorf("no tick of %s ran: %w", e.Name, ctx.Err())
	}
	s.Stop() // the run's row is final once its handler has returned
	runs, err := schedule.NewRunReaderFromPool(ctx, pool, nil)
	if err != nil {
		return err
	}
	defer runs.Close()
	latest, err := runs.Latest(ctx, e.Name, 100)
	if err != nil {
		return err
	}
	for _, st := range latest {
		if st.Fire.Equal(r.Fire) {
			fmt.Fprintf(out, "schedule: the run of %s at %s read back: %s on %s, token %d\n",
				st.Job, st.Fire.UTC().Format(time.RFC3339), st.State, st.Node, st.Token)
			return nil
		}
	}
	return fmt.Errorf("the run of %s at %s is not in the run table", e.Name, r.Fire)
}

// leader campaigns in an election on the pglease Locker, with its leader
// record on a board on the pool, sees itself lead through Observe, and
// writes the leader's row through the fence with the term's token.
func leader(ctx context.Context, pool *pgxpool.Pool, locker aegis.Locker, out io.Writer) error {
	board, err := elect.NewSQLBoardFromPool(ctx, pool, nil) // the leader record Observe reads
	if err != nil {
		return err
	}
	e, err := elect.New(locker, "onepool", &elect.Config{Node: node, Board: board})
	if err != nil {
		return err
	}
	lead, err := e.Campaign(ctx)
	if err != nil {
		return err
	}
	defer lead.Resign(context.WithoutCancel(ctx))
	// An observer (another replica, say) sees the leader: the first value
	// is the current record, published when the campaign won.
	octx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	changes, err := e.Observe(octx)
	if err != nil {
		return err
	}
	for l := range changes {
		if l.Token == lead.Token() {
			fmt.Fprintf(out, "elect: observed %s leading onepool, term token %d\n", l.Node, l.Token)
			break
		}
	}
	if octx.Err() != nil {
		return fmt.Errorf("observe: the leader's record was not seen within 10s")
	}
	stop()
	err = pgx.BeginFunc(lead.Context(), pool, func(tx pgx.Tx) error {
		if err := fence.Check(lead.Context(), tx, "leader/onepool", lead.Token()); err != nil {
			return err
		}
		_, err := tx.Exec(lead.Context(), `INSERT INTO onepool_leader VALUES ('onepool', $1, $2)
			ON CONFLICT (name) DO UPDATE SET node = excluded.node, term = excluded.term`, lead.Node(), int64(lead.Token()))
		return err
	})
	if err != nil {
		return fmt.Errorf("write the leader's row: %w", err)
	}
	fmt.Fprintf(out, "elect: %s leads onepool, term token %d\n", lead.Node(), lead.Token())
	return nil
}
