package node

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// The strategies' modes, set up in a node: lease mode's Lockers (the
// backends' and the lab's own) and leader mode's election, queue and
// workers.

// labLockers are the lab's own Lockers, for the strategies that package
// aegis does not offer as one: no coordination, a PostgreSQL advisory lock,
// an optimistic claim row.
var labLockers = map[string]func(ctx context.Context, n *node) (aegis.Locker, func(), error){
	"lab-everyone": func(context.Context, *node) (aegis.Locker, func(), error) { return &everyone{}, func() {}, nil },
	"lab-advisory": openAdvisory,
	"lab-optimistic": func(_ context.Context, n *node) (aegis.Locker, func(), error) {
		return &optimistic{n: n}, func() {}, nil
	},
	"lab-redis-del": openRedisDel,
	"lab-fail-open": openFailOpen,
	"lab-nobump":    openNoBump,
}

// openLocker opens the lease-mode strategy's Locker.
func (n *node) openLocker(ctx context.Context) (aegis.Locker, func(), error) {
	if open, ok := labLockers[n.strat.Backend]; ok {
		return open(ctx, n)
	}
	srv := backend.FromEnv()
	// A ZooKeeper session as long as the lease: a holder paused past
	// --ttl loses its session, and its lock goes to another node, as the
	// other backends' leases do.
	srv.ZKSessionTimeout = n.c.TTL
	// The row-lease backends keep a grant history: the store's own time of
	// each grant, which the node reports (a node paused between its grant
	// and its handler would otherwise report the grant when it woke).
	srv.LeaseHistory, srv.LeaseHolder = lab.GrantHistory, fmt.Sprintf("node%d.%d", n.c.Node, n.c.Incarnation)
	l, closeFn, err := backend.Open(ctx, n.strat.Backend, srv)
	if err != nil {
		return nil, nil, fmt.Errorf("open the %s backend: %w", n.strat.Backend, err)
	}
	closeGrants, err := n.openGrants(srv)
	if err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("open the %s backend's grant history: %w", n.strat.Backend, err)
	}
	return l, func() { closeGrants(); closeFn() }, nil
}

// openGrants sets n.grants to read the grant history of the strategy's
// store where it keeps one (postgres, sqlite), and returns what closes it.
func (n *node) openGrants(srv backend.Servers) (func(), error) {
	var db *sql.DB
	var grants func(ctx context.Context, key string, limit int) ([]pglease.Grant, error)
	var err error
	switch n.strat.Backend {
	case "postgres":
		if db, err = sql.Open("pgx", srv.PostgresURL); err != nil {
			return nil, err
		}
		var in *pglease.Inspector
		if in, err = pglease.NewInspector(db, nil); err == nil {
			grants = in.Grants
		}
	case "sqlite":
		if db, err = sqlitelease.Open(srv.SQLitePath); err != nil {
			return nil, err
		}
		var in *sqlitelease.Inspector
		if in, err = sqlitelease.NewInspector(db, nil); err == nil {
			grants = in.Grants
		}
	default:
		return func() {}, nil
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	db.SetMaxOpenConns(1)
	n.grants = grants
	return func() { db.Close() }, nil
}

// everyone grants every caller: the "none" strategy's Locker, so that
// every replica runs every tick.
type everyone struct{ n atomic.Int64 }

func (e *everyone) TryAcquire(_ context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	return &aegis.Lease{Key: key, Token: aegis.Token(e.n.Add(1)), Owner: owner.New(), TTL: ttl, Deadline: driver.LocalDeadline(time.Now(), ttl)}, nil
}

func (e *everyone) Renew(_ context.Context, l *aegis.Lease, ttl time.Duration) error {
	l.TTL, l.Deadline = ttl, driver.LocalDeadline(time.Now(), ttl)
	return nil
}

func (e *everyone) Release(context.Context, *aegis.Lease) error { return nil }

// advisory holds pg_try_advisory_lock on a dedicated connection per key.
// PostgreSQL's lock has no expiry: it is held until unlocked or until its
// connection ends (a partition drops it while the holder works on). Renew
// arms an unlock after its ttl (lease mode's LockAtLeastFor), which the
// next Renew or Release replaces.
type advisory struct {
	url string
	mu  sync.Mutex
	// held are the keys this process holds, by key: its lock connection
	// and its pending unlock.
	held map[string]*advisoryLock
	// idle are connections that hold no lock, kept for the next attempt:
	// a new connection costs the server tens of milliseconds of CPU, and
	// each node tries every key at every tick.
	idle []*pgx.Conn
}

// advisoryIdle is how many lock-free connections a node keeps.
const advisoryIdle = 3

type advisoryLock struct {
	conn  *pgx.Conn
	token aegis.Token
	timer *time.Timer
}

var advisoryTokens atomic.Int64

func openAdvisory(_ context.Context, n *node) (aegis.Locker, func(), error) {
	a := &advisory{url: n.c.Store, held: map[string]*advisoryLock{}}
	return a, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for key, h := range a.held {
			_ = h.conn.Close(context.Background())
			delete(a.held, key)
		}
		for _, c := range a.idle {
			_ = c.Close(context.Background())
		}
		a.idle = nil
	}, nil
}

func advisoryKey(key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return int64(h.Sum64())
}

func (a *advisory) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.held[key]; ok {
		return nil, aegis.ErrHeld // the session lock is re-entrant: refuse it here
	}
	conn, err := a.tryLock(ctx, key)
	if err != nil {
		return nil, err
	}
	h := &advisoryLock{conn: conn, token: aegis.Token(advisoryTokens.Add(1))}
	a.held[key] = h
	return &aegis.Lease{Key: key, Token: h.token, Owner: owner.New(), TTL: ttl, Deadline: driver.LocalDeadline(time.Now(), ttl)}, nil
}

// tryLock takes key's lock on an idle connection, or on a new one when
// none is left (an idle one cut by a partition fails and is closed); the
// connection of a refused attempt goes back to the idle ones.
func (a *advisory) tryLock(ctx context.Context, key string) (*pgx.Conn, error) {
	for {
		var conn *pgx.Conn
		reused := len(a.idle) > 0
		if reused {
			conn, a.idle = a.idle[len(a.idle)-1], a.idle[:len(a.idle)-1]
		} else {
			var err error
			if conn, err = pgx.Connect(ctx, a.url); err != nil {
				return nil, err
			}
		}
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", advisoryKey(key)).Scan(&got); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			if reused && ctx.Err() == nil {
				continue
			}
			return nil, err
		}
		if !got {
			a.keepLocked(conn)
			return nil, aegis.ErrHeld
		}
		return conn, nil
	}
}

// keepLocked keeps conn, which holds no lock, for a next attempt, or
// closes it when enough are kept.
func (a *advisory) keepLocked(conn *pgx.Conn) {
	if len(a.idle) >= advisoryIdle || conn.IsClosed() {
		_ = conn.Close(context.Background())
		return
	}
	a.idle = append(a.idle, conn)
}

// lock returns the held lock of l, nil when it is gone.
func (a *advisory) lock(l *aegis.Lease) *advisoryLock {
	h := a.held[l.Key]
	if h == nil || h.token != l.Token || h.conn.IsClosed() {
		return nil
	}
	return h
}

func (a *advisory) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.lock(l)
	if h == nil {
		return aegis.ErrLost
	}
	if err := h.conn.Ping(ctx); err != nil {
		a.dropLocked(l.Key, h)
		return aegis.ErrLost // the connection, and the lock with it, is gone
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(ttl, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.held[l.Key] == h {
			a.dropLocked(l.Key, h)
		}
	})
	l.TTL, l.Deadline = ttl, driver.LocalDeadline(time.Now(), ttl)
	return nil
}

func (a *advisory) Release(ctx context.Context, l *aegis.Lease) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.lock(l)
	if h == nil {
		return aegis.ErrLost
	}
	a.dropLocked(l.Key, h)
	return nil
}

// dropLocked unlocks the session's advisory locks and keeps the
// connection; when the unlock fails (the connection is gone, or cut),
// closing the connection ends the session and its locks.
func (a *advisory) dropLocked(key string, h *advisoryLock) {
	if h.timer != nil {
		h.timer.Stop()
	}
	delete(a.held, key)
	ctx, cancel := context.WithTimeout(context.Background(), advisoryUnlockWait)
	defer cancel()
	if _, err := h.conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		_ = h.conn.Close(context.Background())
		return
	}
	a.keepLocked(h.conn)
}

// advisoryUnlockWait bounds an unlock's round trip; past it the
// connection is closed, which unlocks too.
const advisoryUnlockWait = time.Second

// optimistic is a claim row per key, taken by compare-and-set on its
// version: the version is the token, and the claim is stealable once its
// until_ms, set by the claimer's (skewed) clock, is behind the stealer's.
type optimistic struct{ n *node }

func (o *optimistic) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	db := o.n.db
	if _, err := db.ExecContext(ctx, lab.OptimisticRowSQL, key); err != nil {
		return nil, err
	}
	var version, until int64
	if err := db.QueryRowContext(ctx, lab.OptimisticReadSQL, key).Scan(&version, &until); err != nil {
		return nil, err
	}
	now := o.n.clock.Now()
	if now.UnixMilli() < until {
		return nil, aegis.ErrHeld
	}
	call := time.Now()
	res, err := db.ExecContext(ctx, lab.OptimisticClaimSQL, key, version, now.Add(ttl).UnixMilli(), o.n.c.Node)
	if err != nil {
		return nil, err
	}
	if rows, _ := res.RowsAffected(); rows == 0 {
		return nil, aegis.ErrHeld // another node's compare-and-set won
	}
	// The new version is registered now, whether or not a run follows (a
	// grant the scheduler drops still moved the version on): the checker's
	// history needs it.
	_, job, _ := strings.Cut(key, "/")
	o.n.emit(lab.NodeEvent{Kind: lab.EvClaimed, Job: job, Token: version + 1, Since: call.UnixNano()})
	return &aegis.Lease{Key: key, Token: aegis.Token(version + 1), Owner: owner.New(), TTL: ttl, Deadline: driver.LocalDeadline(time.Now(), ttl)}, nil
}

func (o *optimistic) Renew(ctx context.Context, l *aegis.Lease, ttl time.Duration) error {
	return o.set(ctx, l, o.n.clock.Now().Add(ttl).UnixMilli(), func() {
		l.TTL, l.Deadline = ttl, driver.LocalDeadline(time.Now(), ttl)
	})
}

func (o *optimistic) Release(ctx context.Context, l *aegis.Lease) error {
	return o.set(ctx, l, 0, func() {})
}

func (o *optimistic) set(ctx context.Context, l *aegis.Lease, until int64, ok func()) error {
	res, err := o.n.db.ExecContext(ctx, lab.OptimisticUntilSQL, l.Key, int64(l.Token), until)
	if err != nil {
		return err
	}
	if rows, _ := res.RowsAffected(); rows == 0 {
		return aegis.ErrLost
	}
	ok()
	return nil
}

// optimisticKey is the claim row's key of job: the lease key lease mode
// uses (the namespace, then the job).
func optimisticKey(ns, job string) string { return ns + "/" + job }

// leaderScheduler sets up leader mode: an election over pglease, the
// scheduler, and a queue client with one worker on the run's queue (lease
// --ttl); what it returns starts the client after the scheduler and stops
// both.
func (n *node) leaderScheduler(ctx context.Context, cfg *schedule.Config) (*schedule.Scheduler, func(context.Context) error, func(), error) {
	pcfg, err := pgxpool.ParseConfig(n.c.Store)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("leader mode: the store's URL: %w", err)
	}
	pcfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("leader mode: connect: %w", err)
	}
	locker, err := pglease.New(pool, nil)
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	e, err := elect.New(locker, "lab-leader."+n.ns, &elect.Config{Node: cfg.Node, TTL: n.c.TTL})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	cfg.Leader = &schedule.LeaderConfig{Election: e, Pool: pool, Namespace: n.ns}
	s, err := schedule.New(cfg)
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	ws := queue.NewWorkers()
	if err := s.AddWorker(ws); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	qc, err := queue.New(pool, &queue.Config{
		ID:           cfg.Node,
		Queues:       map[string]queue.QueueConfig{schedule.DefaultLeaderQueue + "." + n.ns: {MaxWorkers: 1}},
		Workers:      ws,
		Lease:        n.c.TTL,
		ReapInterval: max(n.c.TTL/4, 10*time.Millisecond),
		PollInterval: max(min(n.c.Tick/4, 250*time.Millisecond), 10*time.Millisecond),
		SyncComplete: true,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		pool.Close()
		return nil, nil, nil, fmt.Errorf("leader mode: %w", err)
	}
	var mu sync.Mutex
	stopped := false
	startClient := func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return nil
		}
		return qc.Start(ctx)
	}
	start := func(ctx context.Context) error {
		var standby bool
		if err := pool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
			return err
		}
		if !standby {
			return startClient(ctx)
		}
		// A hot standby refuses LISTEN, which the queue's client starts
		// with, and every claim: the second region's worker starts once
		// its store is promoted (the election refuses it until then too).
		go n.whenPromoted(ctx, pool, startClient)
		return nil
	}
	stop := func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		// Graceful: a worker inside its critical section (a paused node
		// just resumed) finishes its write, refused or not.
		sctx, cancel := context.WithTimeout(context.Background(), n.c.Window+10*time.Second)
		defer cancel()
		_ = qc.Stop(sctx)
		pool.Close()
	}
	return s, start, stop, nil
}

// whenPromoted runs start once the store is out of recovery (a standby
// promoted), looking every quarter tick until ctx ends: a promotion has no
// notification to wait on. A failed start is an error event.
func (n *node) whenPromoted(ctx context.Context, pool *pgxpool.Pool, start func(context.Context) error) {
	every := max(n.c.Tick/4, 10*time.Millisecond)
	for {
		var standby bool
		err := pool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby)
		if err == nil && !standby {
			if err := start(ctx); err != nil && ctx.Err() == nil {
				n.emit(lab.NodeEvent{Kind: lab.EvError, Detail: "start the queue's client after the promotion: " + err.Error()})
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
