package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/tracing"
)

// writeTimeout bounds a write the client makes on its own (a completion, a
// retry, a hand-back), whatever the job's context.
const writeTimeout = 10 * time.Second

// Migrate creates or upgrades the queue's tables of the default
// Config.Table (aegis_job) in the pool's current schema: Client.Migrate of
// a client without Table. It is safe to call from many processes at once,
// and cheap when the schema is up to date. A nil pool is an error wrapping
// aegis.ErrInvalid.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return invalid("Migrate: pool is nil")
	}
	t, _ := newTables("Config.Table", DefaultTable)
	return migrateTables(ctx, pool, t)
}

// Migrate creates or upgrades the tables of the client's Config.Table,
// recording their migrations under "queue" for the default table (as
// before Table existed) and "queue:<Table>" for another. It is safe to
// call from many processes at once, and cheap when the schema is up to
// date.
func (c *Client) Migrate(ctx context.Context) error {
	return migrateTables(ctx, c.pool, c.cfg.tables)
}

func migrateTables(ctx context.Context, pool *pgxpool.Pool, t tables) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrate.Apply(ctx, db, migrate.Postgres, t.component(), t.migrations()); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

// Client enqueues jobs and, once started, works the queues of its Config.
// It is safe for concurrent use.
type Client struct {
	pool    *pgxpool.Pool
	db      db // the pool, which the client's statements go through (tests wrap it)
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	sql     statements
	tracer  trace.Tracer // nil: not traced

	started atomic.Bool
	stopped atomic.Bool
	stop    sync.Once
	stopErr error

	// Set by Start.
	channel    string
	base       context.Context // parent of every job's context
	baseCancel context.CancelCauseFunc
	fetchStop  context.CancelFunc // stops the producers
	loopsStop  context.CancelFunc // stops heartbeats, maintenance, the listener
	producers  map[string]*producer
	completer  *completer
	fetchWG    sync.WaitGroup // producers
	jobsWG     sync.WaitGroup // claimed jobs not yet finished
	workersWG  sync.WaitGroup // the producers' worker goroutines
	loopsWG    sync.WaitGroup // heartbeat, maintenance, listener
	compWG     sync.WaitGroup // the completer

	mu         sync.Mutex
	runs       map[int64]*run // claims this client holds
	writing    int            // job goroutines writing their outcome
	writesIdle *sync.Cond     // writing dropped to 0
	closing    bool           // Stop's deadline passed: write nothing more
	// The last VACUUM of the maintenance loop (its goroutine only).
	vacuumEnd  time.Time
	vacuumTook time.Duration
	// nextScheduled wakes the maintenance loop when this client schedules
	// a job sooner than its next wake-up (a short snooze or retry).
	nextScheduled chan time.Time
}

// New returns a client on pool. It does no I/O: run Migrate (or
// Client.Migrate, for a Config.Table of its own) once before
// the first Enqueue or Start. A nil cfg means defaults (an enqueue-only
// client).
func New(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, invalid("New: pool is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(c.Registerer, pool, c.tables)
	if err != nil {
		return nil, err
	}
	cl := &Client{
		pool:          pool,
		db:            pool,
		cfg:           c,
		log:           c.Logger.With("queue_client", c.ID),
		metrics:       m,
		sql:           newStatements(c),
		tracer:        tracing.Tracer(c.TracerProvider, scopeName),
		runs:          map[int64]*run{},
		nextScheduled: make(chan time.Time, 1),
	}
	if h := c.hooks; h != nil && h.db != nil {
		cl.db = h.db(pool)
	}
	cl.writesIdle = sync.NewCond(&cl.mu)
	return cl, nil
}

// stmt is the statement s (sql.go, written with the default names) for
// the client's tables.
func (c *Client) stmt(s string) string { return c.cfg.tables.sql(s) }

// ID is the client's ID (Config.ID or its default).
func (c *Client) ID() string { return c.cfg.ID }

// Start starts working the client's queues: one producer per queue claims
// jobs when it has free worker slots, woken by LISTEN/NOTIFY and polling;
// heartbeats renew the leases of running jobs; the maintenance loop
// reclaims expired leases, promotes due scheduled jobs and prunes finished
// ones. ctx bounds the start only (the schema check and the first LISTEN);
// the client runs until Stop.
func (c *Client) Start(ctx context.Context) error {
	if len(c.cfg.Queues) == 0 {
		return invalid("Start: Config.Queues is empty: this client only enqueues")
	}
	if c.stopped.Load() {
		return errors.New("queue: Start: the client was stopped")
	}
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("queue: Start: already started")
	}
	if err := c.db.QueryRow(ctx, c.stmt(channelNameSQL)).Scan(&c.channel); err != nil {
		c.started.Store(false)
		return fmt.Errorf("queue: start: %w", err)
	}
	if _, err := c.db.Exec(ctx, c.stmt(checkSchemaSQL)); err != nil {
		c.started.Store(false)
		return fmt.Errorf("queue: start: %w", translate(err))
	}

	c.base, c.baseCancel = context.WithCancelCause(context.Background())
	fetchCtx, fetchStop := context.WithCancel(context.Background())
	loopsCtx, loopsStop := context.WithCancel(context.Background())
	c.fetchStop, c.loopsStop = fetchStop, loopsStop

	c.producers = map[string]*producer{}
	total := 0
	for name, q := range c.cfg.Queues {
		c.producers[name] = newProducer(c, name, q)
		total += q.MaxWorkers + q.ClaimAhead
	}
	c.completer = newCompleter(c, 2*total)

	var l *listener
	if c.cfg.hooks == nil || !c.cfg.hooks.noListen {
		l = newListener(c)
		if err := l.connect(ctx); err != nil {
			fetchStop()
			loopsStop()
			c.baseCancel(nil)
			c.started.Store(false)
			return fmt.Errorf("queue: start: listen: %w", err)
		}
		c.loopsWG.Go(func() { l.run(loopsCtx) })
	}
	c.compWG.Go(c.completer.run)
	c.loopsWG.Go(func() { c.heartbeatLoop(loopsCtx) })
	c.loopsWG.Go(func() { c.maintenanceLoop(loopsCtx) })
	for _, p := range c.producers {
		for range p.workers {
			c.workersWG.Go(p.work)
		}
		for range p.claimers() {
			c.fetchWG.Go(func() { p.run(fetchCtx) })
		}
	}
	c.log.Info("queue client started", "queues", slices.Sorted(maps.Keys(c.cfg.Queues)), "lease", c.cfg.Lease)
	return nil
}

// Stop stops the client gracefully. It stops claiming at once, then waits
// for running jobs to finish and their outcomes to be written. When ctx
// ends first, it cancels the remaining jobs' contexts (cause ErrStopping),
// hands their leases back with a bumped token, so another client can run
// them at once and nothing the old handlers write afterwards lands, and
// returns ctx's error. A handler that ignores its context may still be
// running then; nothing it reports is written.
//
// Stop is safe to call more than once and before Start.
func (c *Client) Stop(ctx context.Context) error {
	c.stop.Do(func() {
		c.stopped.Store(true)
		if !c.started.Load() {
			return
		}
		c.stopErr = c.shutdown(ctx)
	})
	return c.stopErr
}

func (c *Client) shutdown(ctx context.Context) error {
	c.fetchStop()
	c.fetchWG.Wait()
	// No claim comes any more: the workers run what is queued, then exit.
	for _, p := range c.producers {
		close(p.runs)
	}

	jobsDone := make(chan struct{})
	go func() { c.jobsWG.Wait(); close(jobsDone) }()
	var err error
	select {
	case <-jobsDone:
	case <-ctx.Done():
		err = ctx.Err()
		c.handBack()
	}
	// Every job is done or handed back: wait for the outcomes being
	// written, then for the completer to flush. A handler that ignores
	// its context keeps its worker goroutine; Stop does not wait for it.
	c.mu.Lock()
	for c.writing > 0 {
		c.writesIdle.Wait()
	}
	c.mu.Unlock()
	c.completer.close()
	c.compWG.Wait()
	c.loopsStop()
	c.loopsWG.Wait()
	c.baseCancel(ErrStopping)
	c.log.Info("queue client stopped", "graceful", err == nil)
	return err
}

// handBack gives back the leases of the jobs whose handlers are still
// running, in one fenced statement, and cancels their contexts.
func (c *Client) handBack() {
	var ids, tokens []int64
	var runs []*run
	c.mu.Lock()
	c.closing = true
	for _, r := range c.runs {
		if r.phase.CompareAndSwap(phaseWorking, phaseLost) {
			ids = append(ids, r.row.ID)
			tokens = append(tokens, int64(r.row.Token))
			runs = append(runs, r)
		}
	}
	c.mu.Unlock()
	for _, r := range runs {
		r.cancel(ErrStopping)
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	res, err := c.sql.handBack(ctx, c.db, ids, tokens)
	if err != nil {
		c.log.Error("queue: hand back leases at shutdown (when its reply was lost they may be handed back); the reaper reclaims what is not when the leases expire", "jobs", len(ids), "err", err)
	} else {
		back := 0
		for i, e := range res {
			if e == nil {
				back++
				continue
			}
			// The token had moved on already: nothing to hand back.
			c.metrics.stale(runs[i].row.Queue, "hand_back").Inc()
			c.log.Warn("queue: stale write rejected: the job's lease was lost before it could be handed back", "op", "hand_back", "err", e)
		}
		c.log.Warn("queue: stop deadline passed: leases handed back", "jobs", len(ids), "handed_back", back)
	}
	for _, r := range runs {
		c.forget(r)
	}
}

// forget drops a claim from the client's books.
func (c *Client) forget(r *run) {
	c.mu.Lock()
	delete(c.runs, r.row.ID)
	c.mu.Unlock()
	r.cancel(nil)
}

// wakeMaintenance tells the maintenance loop that a job becomes due at t.
func (c *Client) wakeMaintenance(t time.Time) {
	select {
	case c.nextScheduled <- t:
	default:
	}
}

// Phases of a claim in this client.
const (
	phaseWorking int32 = iota // the handler runs; heartbeats renew the lease
	phasePending              // completion queued in the completer; heartbeats renew the lease
	phaseWriting              // the outcome is being written
	phaseInTx                 // CompleteTx deleted the row in the handler's transaction
	phaseLost                 // the lease is lost or handed back: write nothing more
)

// run is one claim held by this client.
type run struct {
	client *Client
	row    *JobRow
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer  // the local deadline: cancels ctx with ErrLeaseExpired
	until  atomic.Int64 // the local deadline, in Unix ns: moved by each renewal
	phase  atomic.Int32

	// Traced clients only.
	claim trace.SpanContext // the span of the claim that got the job
	span  trace.Span        // the handler's run: the parent of the outcome's write
}

// deadline is the claim's local deadline: its lease may expire on the
// server after it, and the reaper take the job.
func (r *run) deadline() time.Time { return time.Unix(0, r.until.Load()) }

// completeInTx moves the claim to phaseInTx, if its handler still runs.
func (r *run) completeInTx() bool {
	return r.phase.CompareAndSwap(phaseWorking, phaseInTx)
}

// lose marks the lease lost, if the handler still runs, and cancels the
// job's context with cause.
func (r *run) lose(cause error) bool {
	r.client.mu.Lock()
	ok := r.phase.CompareAndSwap(phaseWorking, phaseLost)
	r.client.mu.Unlock()
	if ok {
		r.cancel(cause)
	}
	return ok
}
