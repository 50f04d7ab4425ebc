package schedule_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/tcpproxy"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// leaderNode is one replica in leader mode: its own pool (through a proxy
// of its own, so that a test can cut it off), a scheduler that may
// campaign, and a queue client that may work.
type leaderNode struct {
	name  string
	proxy *tcpproxy.Proxy
	pool  *pgxpool.Pool
	sched *schedule.Scheduler
	qc    *queue.Client
}

type leaderOpts struct {
	election string        // the election's name
	ttl      time.Duration // the election's TTL
	lease    time.Duration // the workers' job lease
	reap     time.Duration // the workers' reap interval
	log      *runLog

	queueTable, fenceTable string // LeaderConfig's; "": the defaults
}

// newLeaderNode builds a replica for jobs; it starts nothing.
func newLeaderNode(t *testing.T, dbURL, name string, o leaderOpts, jobs ...schedule.Job) *leaderNode {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	proxy, err := tcpproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	locker, err := pglease.New(pool, nil)
	require.NoError(t, err)
	e, err := elect.New(locker, o.election, &elect.Config{Node: name, TTL: o.ttl})
	require.NoError(t, err)
	s, err := schedule.New(&schedule.Config{Node: name, Leader: &schedule.LeaderConfig{Election: e, Pool: pool, QueueTable: o.queueTable, FenceTable: o.fenceTable}, OnEvent: o.log.onEvent})
	require.NoError(t, err)
	require.Equal(t, schedule.ModeLeader, s.Mode())
	for _, j := range jobs {
		require.NoError(t, s.Add(j))
	}
	ws := queue.NewWorkers()
	require.NoError(t, s.AddWorker(ws))
	qc, err := queue.New(pool, &queue.Config{
		ID:           name,
		Table:        o.queueTable,
		Queues:       map[string]queue.QueueConfig{schedule.DefaultLeaderQueue: {MaxWorkers: 1}},
		Workers:      ws,
		Lease:        o.lease,
		ReapInterval: o.reap,
		RetryBackoff: func(int) time.Duration { return 10 * time.Millisecond },
		Logger:       slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	n := &leaderNode{name: name, proxy: proxy, pool: pool, sched: s, qc: qc}
	t.Cleanup(func() {
		proxy.Heal()
		stop(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, qc.Stop(ctx))
	})
	return n
}

// campaign starts the replica's scheduler: it campaigns, and enqueues
// while it leads.
func (n *leaderNode) campaign(t *testing.T) { require.NoError(t, n.sched.Start(context.Background())) }

// work starts the replica's queue client: it works the runs.
func (n *leaderNode) work(t *testing.T) { require.NoError(t, n.qc.Start(context.Background())) }

// enqueued returns, per fire time, the nodes that enqueued it.
func (l *runLog) enqueued() map[time.Time][]string {
	m := map[time.Time][]string{}
	for _, e := range l.eventsOf(schedule.EventEnqueued) {
		m[e.Fire.UTC()] = append(m[e.Fire.UTC()], e.Node)
	}
	return m
}

func runRows(t *testing.T, dbURL, job string) []schedule.RunRecord {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	st, err := schedule.NewStore(t.Context(), db, nil)
	require.NoError(t, err)
	rows, err := st.Runs(t.Context(), job, 1000)
	require.NoError(t, err)
	return rows
}

// baseToken is a tick's token before any claim: fire ms × 10⁶.
func baseToken(fire time.Time) aegis.Token { return aegis.Token(fire.UnixMilli() * 1_000_000) }

// Three replicas: one is elected and enqueues every tick; the three
// workers compete for the runs (a run takes longer than the period, so
// they run side by side); every enqueued tick runs exactly once, with the
// queue job's token in its context, and its run row records the worker
// and the outcome.
func TestLeaderThreeReplicas(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	log := &runLog{}
	job := schedule.Job{Name: "report", Every: 100 * time.Millisecond, Overlap: schedule.OverlapAllow, Run: func(ctx context.Context) error {
		log.record(ctx)
		log.enter()
		defer log.exit()
		time.Sleep(250 * time.Millisecond) // the work
		return nil
	}}
	o := leaderOpts{election: "sched-three", ttl: 2 * time.Second, lease: 2 * time.Second, reap: 100 * time.Millisecond, log: log}
	var nodes []*leaderNode
	for i := range 3 {
		n := newLeaderNode(t, dbURL, fmt.Sprintf("node-%d", i), o, job)
		n.campaign(t)
		n.work(t)
		nodes = append(nodes, n)
	}
	waitFor(t, 20*time.Second, func() bool { return len(log.enqueued()) >= 15 }, "the leader enqueues 15 ticks")
	require.Len(t, log.eventsOf(schedule.EventElected), 1, "one leader")
	leader := log.eventsOf(schedule.EventElected)[0].Node
	// No more ticks: the followers stop first, then the leader, so that a
	// follower still campaigning is not elected by the leader's resignation.
	for _, n := range nodes {
		if n.name != leader {
			stop(t, n.sched)
		}
	}
	for _, n := range nodes {
		if n.name == leader {
			stop(t, n.sched)
		}
	}
	enqueued := log.enqueued()
	waitFor(t, 20*time.Second, func() bool { return log.count() >= len(enqueued) }, "every enqueued tick runs")
	require.Len(t, log.eventsOf(schedule.EventElected), 1, "one leader, also while the replicas stopped")
	runs := log.perTick()
	workers := map[string]bool{}
	for fire, by := range enqueued {
		require.Equal(t, []string{leader}, by, "tick %s: enqueued once, by the leader", fire)
		require.Equal(t, 1, runs[fire], "tick %s ran %d times", fire, runs[fire])
	}
	for _, r := range log.snapshot() {
		require.Contains(t, enqueued, r.Fire.UTC())
		require.Equal(t, baseToken(r.Fire)+1, r.Token, "the queue job's first claim, offset by the fire time")
		require.Equal(t, 1, r.Attempt)
		workers[r.Node] = true
	}
	require.GreaterOrEqual(t, len(workers), 2, "the workers competed: %v", workers)
	require.GreaterOrEqual(t, log.peak, 2, "runs went side by side on several workers")

	waitFor(t, 10*time.Second, func() bool {
		for _, row := range runRows(t, dbURL, "report") {
			if row.State != "succeeded" {
				return false
			}
		}
		return true
	}, "every run row records its outcome")
	for _, row := range runRows(t, dbURL, "report") {
		require.Equal(t, baseToken(row.Fire)+1, row.Token)
		require.True(t, workers[row.Node], "row %+v: the worker's node", row)
		require.Contains(t, enqueued, row.Fire)
	}
	require.Empty(t, log.eventsOf(schedule.EventError))
}

// The leader resigns (its scheduler stops), then the next leader is cut
// off from the database (a crash, as far as the store can tell): each time
// another replica is elected with a greater term token and goes on from
// the last tick enqueued; no tick is enqueued twice and every enqueued
// tick runs once.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	log := &runLog{}
	job := schedule.Job{Name: "nightly", Every: 100 * time.Millisecond, Run: func(ctx context.Context) error {
		log.record(ctx)
		return nil
	}}
	o := leaderOpts{election: "sched-failover", ttl: time.Second, lease: 2 * time.Second, reap: 100 * time.Millisecond, log: log}
	nodes := map[string]*leaderNode{}
	for i := range 3 {
		n := newLeaderNode(t, dbURL, fmt.Sprintf("node-%d", i), o, job)
		n.campaign(t)
		n.work(t)
		nodes[n.name] = n
	}
	// leaderAfter waits for the k-th election and k*5 ticks enqueued by
	// its leader, and returns the leader.
	leaderAfter := func(k int) *leaderNode {
		waitFor(t, 20*time.Second, func() bool { return len(log.eventsOf(schedule.EventElected)) >= k }, "election %d", k)
		e := log.eventsOf(schedule.EventElected)[k-1]
		waitFor(t, 20*time.Second, func() bool {
			n := 0
			for _, by := range log.enqueued() {
				if by[0] == e.Node {
					n++
				}
			}
			return n >= 5
		}, "leader %d (%s) enqueues", k, e.Node)
		return nodes[e.Node]
	}
	first := leaderAfter(1)
	stop(t, first.sched) // resigns
	second := leaderAfter(2)
	require.NotEqual(t, first.name, second.name)
	// The second leader crashes, as the database sees it: cut off. (Its
	// worker stops first: a worker cut off in the middle of a run would
	// have the run retried elsewhere, which is the queue's at-least-once,
	// not this test's subject.)
	stopCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, second.qc.Stop(stopCtx))
	second.proxy.Cut()
	third := leaderAfter(3)
	require.NotEqual(t, second.name, third.name)
	for _, n := range nodes {
		stop(t, n.sched)
	}
	second.proxy.Heal()
	enqueued := log.enqueued()
	waitFor(t, 20*time.Second, func() bool {
		runs := log.perTick()
		for fire := range enqueued {
			if runs[fire] == 0 {
				return false
			}
		}
		return true
	}, "every enqueued tick runs")

	elected := log.eventsOf(schedule.EventElected)
	for i := 1; i < len(elected); i++ {
		require.Greater(t, elected[i].Token, elected[i-1].Token, "term tokens increase")
	}
	runs := log.perTick()
	for fire, by := range enqueued {
		require.Len(t, by, 1, "tick %s enqueued by %v", fire, by)
		require.Equal(t, 1, runs[fire], "tick %s ran %d times", fire, runs[fire])
	}
	for fire, n := range runs {
		require.Contains(t, enqueued, fire, "tick %s ran (%d times) without an enqueue", fire, n)
	}
	requireRows(t, runRows(t, dbURL, "nightly"), log)
}

// requireRows checks the run rows against the log: one row per tick, once
// ever: an enqueued tick's, or a tick that found the previous tick's job
// still queued or running (overlap forbid, on a loaded machine), recorded
// as skipped and said so.
func requireRows(t *testing.T, rows []schedule.RunRecord, log *runLog) {
	t.Helper()
	enqueued := log.enqueued()
	forbid := map[time.Time]bool{}
	for _, e := range log.eventsOf(schedule.EventSkipped) {
		forbid[e.Fire.UTC()] = forbid[e.Fire.UTC()] || strings.HasPrefix(e.Reason, "overlap forbid")
	}
	seen := map[time.Time]bool{}
	for _, row := range rows {
		require.False(t, seen[row.Fire], "two rows for tick %s", row.Fire)
		seen[row.Fire] = true
		if row.State == "skipped" {
			require.True(t, forbid[row.Fire], "row %+v: skipped by overlap forbid, and said so", row)
			require.NotContains(t, enqueued, row.Fire)
			continue
		}
		require.Contains(t, enqueued, row.Fire, "row %+v", row)
	}
	for fire := range enqueued {
		require.True(t, seen[fire], "tick %s: enqueued, with its row", fire)
	}
}

// A leader whose enqueue arrives after a newer term has enqueued (it was
// paused past its lease; simulated by presenting a greater term token to
// the election's fence first) enqueues nothing: its term ends.
func TestLeaderDeposedEnqueuesNothing(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	log := &runLog{}
	job := schedule.Job{Name: "fenced", Every: 100 * time.Millisecond, Run: func(ctx context.Context) error {
		log.record(ctx)
		return nil
	}}
	o := leaderOpts{election: "sched-deposed", ttl: 2 * time.Second, lease: 2 * time.Second, reap: 100 * time.Millisecond, log: log}
	n := newLeaderNode(t, dbURL, "node-0", o, job)
	n.campaign(t)
	n.work(t)
	waitFor(t, 20*time.Second, func() bool { return len(log.enqueued()) >= 2 }, "the leader enqueues")
	term := log.eventsOf(schedule.EventElected)[0].Token

	// A newer term writes through the election's fence.
	pool, err := pgxpool.New(t.Context(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return fence.Check(t.Context(), tx, "aegis-schedule/sched-deposed", term+1_000_000)
	}))
	waitFor(t, 20*time.Second, func() bool { return len(log.eventsOf(schedule.EventDeposed)) >= 2 }, "the stale terms end")
	stop(t, n.sched)
	var refused int
	for _, e := range log.eventsOf(schedule.EventLost) {
		require.ErrorIs(t, e.Err, aegis.ErrStale)
		refused++
	}
	require.GreaterOrEqual(t, refused, 2)
	// Nothing was enqueued after the fence moved on: the enqueues end
	// with the first refusal.
	first := log.eventsOf(schedule.EventLost)[0]
	for fire := range log.enqueued() {
		require.True(t, fire.Before(first.Fire), "tick %s enqueued after the refusal of %s", fire, first.Fire)
	}
	requireRows(t, runRows(t, dbURL, "fenced"), log)
}

// soon is a schedule with one fire time, 100ms after the scheduler first
// asks. (A fixed time, picked before the replicas were set up, could pass
// during the setup under load: the job loop then starts after it, sees no
// tick to come and returns, and the test waited forever for the run.)
type soon struct {
	mu sync.Mutex
	at time.Time
}

func (s *soon) Next(t time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() {
		s.at = t.Add(100 * time.Millisecond).Truncate(time.Millisecond) // run keys are in ms
	}
	if t.Before(s.at) {
		return s.at
	}
	return time.Time{}
}

// fire is the fire time, once the scheduler has asked.
func (s *soon) fire() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at
}

// A worker paused past its job's lease, deterministically: worker A runs
// the tick and is cut off from the database (no heartbeat); the lease
// expires; worker B's reaper reclaims the job with a greater token and B
// runs and completes it; only then does A's run return. A's fenced write
// (with TokenFrom) and its outcome and completion are refused; B's stand.
func TestLeaderWorkerPausedPastLease(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	setup, err := pgxpool.New(t.Context(), dbURL)
	require.NoError(t, err)
	defer setup.Close()
	require.NoError(t, fence.Migrate(t.Context(), setup))
	_, err = setup.Exec(t.Context(), `CREATE TABLE reconciliation (token bigint NOT NULL, node text NOT NULL)`)
	require.NoError(t, err)

	sched := &soon{}
	// write is the job's business write, fenced by its run token.
	write := func(ctx context.Context, pool *pgxpool.Pool, node string) error {
		token, ok := schedule.TokenFrom(ctx)
		if !ok {
			return fmt.Errorf("no token in the run's context")
		}
		wctx := context.WithoutCancel(ctx) // A writes after its context ended, as a paused process does
		return pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
			if err := fence.Check(wctx, tx, "reconciliation", token); err != nil {
				return err
			}
			_, err := tx.Exec(wctx, `INSERT INTO reconciliation VALUES ($1, $2)`, int64(token), node)
			return err
		})
	}
	logA, logB, logL := &runLog{}, &runLog{}, &runLog{}
	startedA := make(chan aegis.Token, 1)
	releaseA := make(chan struct{})
	var wroteA error
	var nodeA, nodeB *leaderNode
	jobA := schedule.Job{Name: "reconcile", Schedule: sched, Run: func(ctx context.Context) error {
		token, _ := schedule.TokenFrom(ctx)
		select {
		case startedA <- token:
		default: // a second run on A: the test fails on the token count
		}
		block(releaseA, time.Minute) // paused: it ignores its context
		wroteA = write(ctx, nodeA.pool, "A")
		return nil // as a job that does not look at its write's error
	}}
	jobB := jobA
	jobB.Run = func(ctx context.Context) error {
		logB.record(ctx)
		return write(ctx, nodeB.pool, "B")
	}
	// A's lease: long enough that A's first claim survives a loaded
	// machine until the test cuts A off (300ms did not: A's first attempt
	// could fail, and A ran a later claim).
	const lease = 2 * time.Second
	leader := newLeaderNode(t, dbURL, "leader", leaderOpts{election: "sched-paused", ttl: 2 * time.Second, lease: lease, reap: time.Hour, log: logL}, jobA)
	nodeA = newLeaderNode(t, dbURL, "A", leaderOpts{election: "sched-paused", ttl: 2 * time.Second, lease: lease, reap: time.Hour, log: logA}, jobA)
	nodeB = newLeaderNode(t, dbURL, "B", leaderOpts{election: "sched-paused", ttl: 2 * time.Second, lease: 2 * time.Second, reap: 20 * time.Millisecond, log: logB}, jobB)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(releaseA) }) }
	t.Cleanup(release) // before the nodes' Stop, should the test fail first
	leader.campaign(t) // the only one that campaigns; A and B only work
	nodeA.work(t)
	tokenA := testenv.Recv(t, startedA, 30*time.Second, "A to start the enqueued run")
	fire := sched.fire()
	require.Equal(t, baseToken(fire)+1, tokenA, "A's run is the job's first claim")

	// A stops heartbeating; B's reaper reclaims the job once its lease
	// expired; B claims it (token 3), runs and completes it.
	nodeA.proxy.Cut()
	nodeB.work(t)
	waitFor(t, 20*time.Second, func() bool {
		rows := runRows(t, dbURL, "reconcile")
		return len(rows) == 1 && rows[0].State == "succeeded"
	}, "B runs the reclaimed tick")
	rows := runRows(t, dbURL, "reconcile")
	require.Equal(t, "B", rows[0].Node)
	require.Equal(t, baseToken(fire)+3, rows[0].Token, "claim 1 (A), reclaim 2, claim 3 (B)")
	require.Len(t, logB.snapshot(), 1)

	// A resumes: everything it writes with its old token is refused.
	nodeA.proxy.Heal()
	release()
	waitFor(t, 20*time.Second, func() bool { return len(logA.eventsOf(schedule.EventDone)) == 1 }, "A's run returns")
	require.ErrorIs(t, wroteA, aegis.ErrStale, "A's fenced business write")
	var refused bool
	for _, e := range logA.eventsOf(schedule.EventLost) {
		refused = refused || (e.Err != nil && e.Reason == "the run was reclaimed: its outcome and completion are refused")
		if e.Reason != "" {
			require.ErrorIs(t, e.Err, aegis.ErrStale)
		}
	}
	require.True(t, refused, "A's outcome and completion are refused: %v", logA.eventsOf(schedule.EventLost))
	rows = runRows(t, dbURL, "reconcile")
	require.Equal(t, "B", rows[0].Node)
	require.Equal(t, "succeeded", rows[0].State)
	var tokens []int64
	r, err := setup.Query(t.Context(), `SELECT token FROM reconciliation`)
	require.NoError(t, err)
	tokens, err = pgx.CollectRows(r, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{int64(baseToken(fire) + 3)}, tokens, "only B's write landed")
	var live int
	require.NoError(t, setup.QueryRow(t.Context(), `SELECT count(*) FROM aegis_job`).Scan(&live))
	require.Zero(t, live, "B completed the job")

	// Every attempt of the tick is on record: the leader's enqueue, B's
	// success, and A's refused outcome.
	db := stdlib.OpenDBFromPool(setup)
	defer db.Close()
	reader, err := schedule.NewRunReader(t.Context(), db, nil)
	require.NoError(t, err)
	as, err := reader.Attempts(t.Context(), "reconcile", 10)
	require.NoError(t, err)
	byNode := make(map[string]schedule.Attempt)
	for _, a := range as {
		require.Equal(t, fire.UTC(), a.Fire.UTC())
		byNode[a.Node] = a
	}
	require.Len(t, as, 3, "%+v", as)
	require.Equal(t, "enqueued", byNode["leader"].Outcome)
	require.Equal(t, "succeeded", byNode["B"].Outcome)
	require.Equal(t, baseToken(fire)+3, byNode["B"].Token)
	require.Equal(t, "refused", byNode["A"].Outcome, "%+v", byNode["A"])
	require.Equal(t, tokenA, byNode["A"].Token)
	require.Len(t, logA.eventsOf(schedule.EventTwice), 1, "A's run ended after B's claim took the tick")
}

// Leader mode's configuration errors name what is wrong.
func TestLeaderConfig(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), pgURL(t))
	require.NoError(t, err)
	defer pool.Close()
	locker, err := pglease.New(pool, nil)
	require.NoError(t, err)
	e, err := elect.New(locker, "sched-config", nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		cfg  schedule.Config
		want string
	}{
		{schedule.Config{Leader: &schedule.LeaderConfig{Pool: pool}}, "Config.Leader.Election is nil"},
		{schedule.Config{Leader: &schedule.LeaderConfig{Election: e}}, "Config.Leader.Pool is nil"},
		{schedule.Config{Leader: &schedule.LeaderConfig{Election: e, Pool: pool, Queue: " q"}}, "Config.Leader.Queue"},
		{schedule.Config{Leader: &schedule.LeaderConfig{Election: e, Pool: pool}, Locker: locker}, "not several"},
	} {
		_, err := schedule.New(&tc.cfg)
		require.ErrorIs(t, err, aegis.ErrInvalid, tc.want)
		require.ErrorContains(t, err, tc.want)
	}
	s, err := schedule.New(&schedule.Config{Leader: &schedule.LeaderConfig{Election: e, Pool: pool}})
	require.NoError(t, err)
	err = s.Add(schedule.Job{Name: "j", Every: time.Second, Overlap: schedule.OverlapReplace, Run: func(context.Context) error { return nil }})
	require.ErrorContains(t, err, "Job.Overlap replace is not supported in leader mode")
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, s.AddWorker(nil), "ws is nil")
	require.ErrorIs(t, s.AddWorker(nil), aegis.ErrInvalid)

	lm, err := schedule.New(&schedule.Config{Locker: locker})
	require.NoError(t, err)
	require.ErrorContains(t, lm.AddWorker(queue.NewWorkers()), "AddWorker is for leader mode")
	require.ErrorIs(t, lm.AddWorker(queue.NewWorkers()), aegis.ErrInvalid)
}

// Leader mode on tables of other names (LeaderConfig.QueueTable and
// FenceTable, the workers' queue.Config.Table the same): the runs are
// enqueued into that queue, the term tokens fenced in that fence table,
// and the default tables are never made.
func TestLeaderTables(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	log := &runLog{}
	job := schedule.Job{Name: "billing", Every: 100 * time.Millisecond, Run: func(ctx context.Context) error { log.record(ctx); return nil }}
	o := leaderOpts{election: "sched-tables", ttl: 2 * time.Second, lease: 2 * time.Second, reap: 100 * time.Millisecond, log: log,
		queueTable: "billing_job", fenceTable: "billing_fence"}
	n := newLeaderNode(t, dbURL, "node-0", o, job)
	n.campaign(t)
	n.work(t)
	waitFor(t, 20*time.Second, func() bool { return log.count() >= 3 }, "three ticks run through the billing_job queue")
	stop(t, n.sched)
	var fenced int
	var defaults string
	ctx := t.Context()
	require.NoError(t, n.pool.QueryRow(ctx, `SELECT count(*) FROM billing_fence WHERE resource = 'aegis-schedule/sched-tables'`).Scan(&fenced))
	require.NoError(t, n.pool.QueryRow(ctx, `SELECT concat_ws(' ', to_regclass('aegis_job'), to_regclass('aegis_fence'))`).Scan(&defaults))
	require.Equal(t, 1, fenced, "the leader's term token is in billing_fence")
	require.Empty(t, defaults, "the default queue and fence tables were not made: the runs went through billing_job")
}
