// Command oncall is the two processes of the on-call demo that
// examples/catalog is not: a lease holder whose late write the fence
// refuses, and a queue worker that freezes mid-job. With three catalog
// replicas beside them, the database holds what an on-call engineer asks
// the console about at 02:00 (a tick that ran twice, a refused write and
// whose, who holds a key, a schedule no replica runs, stuck and overdue
// jobs, dead jobs). By hand, on PostgreSQL:
//
//	export AEGIS_POSTGRES_URL=postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable
//	go run ./examples/catalog -node a -handlers report & go run ./examples/catalog -node b -handlers report &
//	go run ./examples/catalog -node c -handlers echo &
//	aegis schedule put nightly --cron '0 0 3 * * *' --handler report --args '{"work":"5s"}' --lock-at-most-for 2s
//	aegis schedule put heartbeat --every 2s --handler echo   # replica c's alone
//	aegis schedule put orphan --every 5s --handler nobody    # no replica's: missed, unbound
//	aegis schedule run-now nightly
//	kill -STOP <the pid of the replica that printed nightly's "run">; after the other's "run": kill -CONT <it>
//
//	go run ./examples/oncall -mode lease -holder worker-7 &   # holds invoice/2026-12, writes ledger/2026-12 every second
//	kill -STOP <its pid>
//	go run ./examples/oncall -mode lease -holder worker-8 &   # takes the key once worker-7's TTL is past
//	kill -CONT <worker-7's pid>                              # its next write: refused by the fence
//
//	go run ./examples/oncall -mode worker &                   # works the queue "oncall"
//	go run ./examples/oncall -mode enqueue -kind fail         # fails once: discarded (dead)
//	go run ./examples/oncall -mode enqueue -kind work         # the worker prints "working" …
//	kill -STOP <the worker's pid>                             # … and its job is stuck past its lease
//	go run ./examples/oncall -mode enqueue -kind work -due-ago 12m   # twice: overdue, no worker takes them
//	aegis console --store "$AEGIS_POSTGRES_URL"
//
// The store is -store, else $AEGIS_POSTGRES_URL. Every event is printed as
// a JSON line ({"mode":…,"event":…}), which the end-to-end test reads.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "oncall:", err)
		os.Exit(1)
	}
}

// options are the flags of every mode.
type options struct {
	holder, key, resource   string
	ttl, every              time.Duration
	queue, id, kind, work   string
	lease, dueAgo           time.Duration
	maxAttempts, maxWorkers int
}

func run() error {
	store := flag.String("store", "", "a postgres:// URL (default $AEGIS_POSTGRES_URL)")
	mode := flag.String("mode", "", `what this process is: "lease" (a holder that writes under a fenced lease), "worker" (a queue worker), "enqueue" (enqueue one job and exit)`)
	var o options
	flag.StringVar(&o.holder, "holder", "", "lease: the holder's name in the lease table and its grant history (default host/pid)")
	flag.StringVar(&o.key, "key", "invoice/2026-12", "lease: the lease key")
	flag.StringVar(&o.resource, "resource", "ledger/2026-12", "lease: the fenced resource the holder writes")
	flag.DurationVar(&o.ttl, "ttl", 2*time.Second, "lease: the lease's TTL")
	flag.DurationVar(&o.every, "every", time.Second, "lease: how often the holder writes")
	flag.StringVar(&o.queue, "queue", "oncall", "worker, enqueue: the queue")
	flag.StringVar(&o.id, "id", "", "worker: the client's ID in locked_by (default host/pid/random)")
	flag.DurationVar(&o.lease, "lease", 5*time.Second, "worker: a claim's lease; a frozen worker's job is stuck past it")
	flag.IntVar(&o.maxWorkers, "max-workers", 1, "worker: jobs worked at once")
	flag.StringVar(&o.kind, "kind", "work", `enqueue: "work" (works -work, then succeeds) or "fail" (fails)`)
	flag.StringVar(&o.work, "work", "1h", "enqueue: how long a work job works")
	flag.DurationVar(&o.dueAgo, "due-ago", 0, "enqueue: make the job due this long ago (an overdue job, when no worker takes it)")
	flag.IntVar(&o.maxAttempts, "max-attempts", 1, "enqueue: the job's attempts before it is discarded")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	url := cmp.Or(*store, os.Getenv("AEGIS_POSTGRES_URL"))
	if url == "" {
		return errors.New("no store: set -store or $AEGIS_POSTGRES_URL")
	}
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err) // pgx's errors name no password
	}
	defer pool.Close()
	switch *mode {
	case "lease":
		return hold(ctx, pool, o)
	case "worker":
		return work(ctx, pool, o)
	case "enqueue":
		return enqueue(ctx, pool, o)
	}
	return fmt.Errorf("-mode %q: want lease, worker or enqueue", *mode)
}

// event is one printed line.
type event struct {
	Mode   string `json:"mode"`
	Event  string `json:"event"`
	Holder string `json:"holder,omitempty"`
	Key    string `json:"key,omitempty"`
	Job    int64  `json:"job,omitempty"`
	Token  int64  `json:"token,omitempty"`
	Held   int64  `json:"held,omitempty"` // the token the fence held when it refused
	Err    string `json:"error,omitempty"`
}

var out = struct {
	sync.Mutex
	*json.Encoder
}{Encoder: json.NewEncoder(os.Stdout)}

func say(e event) {
	out.Lock()
	defer out.Unlock()
	_ = out.Encode(e)
}

// The holder's business table: one row per write that landed.
const (
	ledgerTable  = `CREATE TABLE IF NOT EXISTS oncall_ledger (resource text NOT NULL, token bigint NOT NULL, holder text NOT NULL, at timestamptz NOT NULL DEFAULT now())`
	ledgerInsert = `INSERT INTO oncall_ledger (resource, token, holder) VALUES ($1, $2, $3)`
)

// hold holds the key and writes the resource every o.every, each write
// checked by the fence in its own transaction, until the fence refuses
// one: then it says so and waits for its end. It counts no refusal itself
// (no fence.CountRefusal): what an operator sees of the refusal is the
// fence's own record.
func hold(ctx context.Context, pool *pgxpool.Pool, o options) error {
	if err := fence.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, ledgerTable); err != nil {
		return fmt.Errorf("create oncall_ledger: %w", err)
	}
	l, err := pglease.New(pool, &pglease.Config{Holder: o.holder, History: 16})
	if err != nil {
		return err
	}
	h, err := aegis.Hold(ctx, l, o.key, o.ttl)
	if err != nil {
		return err
	}
	defer func() {
		// Released on the way out, also after a signal ended ctx; a lost
		// lease's release fails, which changes nothing.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = h.Release(rctx)
	}()
	lease := h.Lease()
	say(event{Mode: "lease", Event: "held", Holder: o.holder, Key: o.key, Token: int64(lease.Token)})
	// The writes do not wait on h.Context(): a holder paused between its
	// check of the lease and its write cannot either. The fence is what
	// stops the write of a holder that lost its lease without knowing.
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := fence.CheckLease(ctx, tx, o.resource, lease); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, ledgerInsert, o.resource, int64(lease.Token), o.holder)
			return err
		})
		if se, ok := errors.AsType[*fence.StaleError](err); ok {
			say(event{Mode: "lease", Event: "refused", Holder: o.holder, Key: o.key, Token: int64(se.Token), Held: int64(se.Held), Err: err.Error()})
			<-ctx.Done()
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("write %s: %w", o.resource, err)
		}
		say(event{Mode: "lease", Event: "wrote", Holder: o.holder, Key: o.key, Token: int64(lease.Token)})
	}
}

// workArgs is a job that works Work (a duration), then succeeds.
type workArgs struct {
	Work string `json:"work"`
}

func (workArgs) Kind() string { return "oncall.work" }

// failArgs is a job that fails.
type failArgs struct{}

func (failArgs) Kind() string { return "oncall.fail" }

// work works o.queue until a signal.
func work(ctx context.Context, pool *pgxpool.Pool, o options) error {
	if err := queue.Migrate(ctx, pool); err != nil {
		return err
	}
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[workArgs](func(ctx context.Context, j *queue.Job[workArgs]) error {
		d, err := time.ParseDuration(j.Args.Work)
		if err != nil {
			return fmt.Errorf("work: %w", err)
		}
		say(event{Mode: "worker", Event: "working", Job: j.ID, Token: int64(j.Token)})
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}))
	queue.AddWorker(ws, queue.WorkFunc[failArgs](func(ctx context.Context, j *queue.Job[failArgs]) error {
		say(event{Mode: "worker", Event: "failing", Job: j.ID, Token: int64(j.Token)})
		return errors.New("smtp: 550 mailbox unavailable")
	}))
	c, err := queue.New(pool, &queue.Config{
		Queues:  map[string]queue.QueueConfig{o.queue: {MaxWorkers: o.maxWorkers}},
		Workers: ws,
		ID:      o.id,
		Lease:   o.lease,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	say(event{Mode: "worker", Event: "ready"})
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return c.Stop(stop)
}

// enqueue enqueues one job of o.kind on o.queue and prints its id.
func enqueue(ctx context.Context, pool *pgxpool.Pool, o options) error {
	if err := queue.Migrate(ctx, pool); err != nil {
		return err
	}
	c, err := queue.New(pool, nil) // enqueues only: no Workers, any kind
	if err != nil {
		return err
	}
	var args queue.Args
	switch o.kind {
	case "work":
		if _, err := time.ParseDuration(o.work); err != nil {
			return fmt.Errorf("-work: %w", err)
		}
		args = workArgs{Work: o.work}
	case "fail":
		args = failArgs{}
	default:
		return fmt.Errorf("-kind %q: want work or fail", o.kind)
	}
	opts := &queue.EnqueueOpts{Queue: o.queue, MaxAttempts: o.maxAttempts}
	if o.dueAgo > 0 {
		opts.RunAt = time.Now().Add(-o.dueAgo)
	}
	e, err := c.Enqueue(ctx, args, opts)
	if err != nil {
		return err
	}
	say(event{Mode: "enqueue", Event: "enqueued", Job: e.Job.ID})
	return nil
}
