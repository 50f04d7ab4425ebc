package schedule

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/outcome"
	"github.com/aegislab/aegis/queue"
)

// LeaderConfig configures leader mode: the replicas elect a scheduler; the
// leader enqueues each tick's run as a job of package queue; workers (the
// queue.Clients of any replicas, with the scheduler's worker: AddWorker)
// compete for the jobs with FOR UPDATE SKIP LOCKED.
type LeaderConfig struct {
	// Election elects the replica that enqueues. Required. Its lease TTL
	// (elect.Config.TTL) is how long a crashed leader's ticks wait.
	Election *elect.Election
	// Pool is the PostgreSQL database of the queue, of the run table and
	// of the leader's fence. Required. Start creates the missing tables
	// (the queue's and the fence's Migrate, the run table).
	Pool *pgxpool.Pool
	// Queue is the queue the runs are enqueued into; the workers' clients
	// must work it. Default "schedule".
	Queue string
	// Table is the run table: the once-ever record of the enqueued ticks
	// and their outcomes. Default "aegis_schedule_run", run-key mode's.
	Table string
	// QueueTable is the queue's job table (queue.Config.Table) the runs
	// are enqueued into; the workers' clients must have the same. Default
	// queue.DefaultTable.
	QueueTable string
	// FenceTable is the fence table (fence.Config.Table) of the leader's
	// term tokens. Default fence.DefaultTable.
	FenceTable string
	// Namespace keeps services that share the database apart: their runs
	// (the run table's namespace), their queue (Queue's default is
	// "schedule" for the default namespace, "schedule.NS" for namespace
	// NS) and their leader (give each namespace an Election of its own:
	// the scheduler refuses one whose name does not end in the namespace
	// when it is not the default one). Default DefaultNamespace, or
	// Config.Catalog's.
	Namespace string
}

// DefaultLeaderQueue is the queue of leader mode's runs by default.
const DefaultLeaderQueue = "schedule"

// leaderClaimer is leader mode's claimer and state (Config.Leader): the
// elected replica's job loops enqueue each tick's run (once ever, by its
// run row), and workers compete for the runs (AddWorker, work).
type leaderClaimer struct {
	s       *Scheduler
	cfg     LeaderConfig
	enqueue *queue.Client // enqueue-only
	fence   *fence.Fence  // of FenceTable
	fenced  string        // the fence resource of the election's terms

	mu      sync.Mutex
	store   *Store // over Pool (NewStoreFromPool); close closes it
	term    *elect.Leadership
	endTerm context.CancelCauseFunc // ends the current term's loops
}

var _ claimer = (*leaderClaimer)(nil)

func newLeaderClaimer(s *Scheduler) (*leaderClaimer, error) {
	catalogNS := ""
	if s.cfg.Catalog != nil {
		catalogNS = s.cfg.Catalog.ns
	}
	cfg := *s.cfg.Leader
	cfg.Namespace = cmp.Or(cfg.Namespace, catalogNS, DefaultNamespace)
	if err := checkNamespace("schedule: Config.Leader.Namespace", cfg.Namespace); err != nil {
		return nil, err
	}
	if cfg.Namespace == DefaultNamespace {
		cfg.Queue = cmp.Or(cfg.Queue, DefaultLeaderQueue)
	} else {
		cfg.Queue = cmp.Or(cfg.Queue, DefaultLeaderQueue+"."+cfg.Namespace)
	}
	switch {
	case cfg.Election == nil:
		return nil, invalid("schedule: Config.Leader.Election is nil")
	case cfg.Namespace != DefaultNamespace && !strings.HasSuffix(cfg.Election.Name(), cfg.Namespace):
		return nil, invalid("schedule: Config.Leader.Election %q: in namespace %q, give the namespace an election of its own (a name that ends in %q)", cfg.Election.Name(), cfg.Namespace, cfg.Namespace)
	case cfg.Pool == nil:
		return nil, invalid("schedule: Config.Leader.Pool is nil")
	case len(cfg.Queue) > queue.MaxQueueLen || !utf8.ValidString(cfg.Queue) || strings.ContainsRune(cfg.Queue, 0) ||
		strings.TrimSpace(cfg.Queue) != cfg.Queue:
		return nil, invalid("schedule: Config.Leader.Queue %.40q: want at most %d bytes of UTF-8, without NUL or surrounding spaces", cfg.Queue, queue.MaxQueueLen)
	}
	qc, err := queue.New(cfg.Pool, &queue.Config{ID: s.cfg.Node, Table: cfg.QueueTable})
	if err != nil {
		return nil, fmt.Errorf("schedule: leader mode: Config.Leader.QueueTable: %w", err)
	}
	f, err := fence.New(&fence.Config{Table: cfg.FenceTable})
	if err != nil {
		return nil, fmt.Errorf("schedule: leader mode: Config.Leader.FenceTable: %w", err)
	}
	if err := s.setNamespace(cfg.Namespace, "Config.Leader.Namespace"); err != nil {
		return nil, err
	}
	return &leaderClaimer{s: s, cfg: cfg, enqueue: qc, fence: f, fenced: "aegis-schedule/" + cfg.Election.Name()}, nil
}

// check refuses OverlapReplace, which leader mode does not support, and
// LockAtLeastFor.
func (l *leaderClaimer) check(j Job) error {
	if j.Overlap == OverlapReplace {
		return invalid("Job.Overlap replace is not supported in leader mode (forbid and allow are)")
	}
	return j.leaseOnly()
}

// prepare creates the missing tables (open).
func (l *leaderClaimer) prepare(ctx context.Context) error {
	_, err := l.open(ctx)
	return err
}

// start campaigns in a goroutine (lead): the terms run the job loops and
// the binder.
// ownsLoops: the leader reads the catalog and runs the loops when it is
// elected, for each of its terms.
func (l *leaderClaimer) ownsLoops() bool { return true }

func (l *leaderClaimer) start(ctx context.Context) {
	l.s.wg.Go(func() { l.lead(ctx) })
}

// replace is never called: check refuses OverlapReplace.
func (l *leaderClaimer) replace(*job, []*active) {}

func (l *leaderClaimer) enqueues() bool { return true }

func (l *leaderClaimer) runStore() *Store {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.store
}

// open creates the tables leader mode needs, once, and returns the run
// table.
func (l *leaderClaimer) open(ctx context.Context) (*Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		return l.store, nil
	}
	if err := l.enqueue.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("schedule: leader mode: %w", err)
	}
	if err := l.fence.Migrate(ctx, l.cfg.Pool); err != nil {
		return nil, fmt.Errorf("schedule: leader mode: %w", err)
	}
	st, err := NewStoreFromPool(ctx, l.cfg.Pool, &StoreConfig{Table: l.cfg.Table, Namespace: l.cfg.Namespace})
	if err != nil {
		return nil, err
	}
	l.store = st
	return st, nil
}

func (l *leaderClaimer) mode() Mode { return ModeLeader }

func (l *leaderClaimer) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		_ = l.store.Close()
	}
}

func (l *leaderClaimer) setTerm(t *elect.Leadership) {
	l.mu.Lock()
	l.term = t
	l.mu.Unlock()
}

// begin records a new term and what ends its loops.
func (l *leaderClaimer) begin(t *elect.Leadership, end context.CancelCauseFunc) {
	l.mu.Lock()
	l.term, l.endTerm = t, end
	l.mu.Unlock()
}

func (l *leaderClaimer) currentTerm() *elect.Leadership {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

// lead campaigns until ctx ends; while this replica leads, every job's
// loop enqueues its ticks. A term ends when leadership is lost (or, fenced,
// found stale), and the replica campaigns again.
func (l *leaderClaimer) lead(ctx context.Context) {
	s := l.s
	for attempt := 0; ctx.Err() == nil; {
		term, err := l.cfg.Election.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.emit(Event{Kind: EventError, Reason: "campaign", Err: err})
			if !backoff.Sleep(ctx, retry.Delay(attempt)) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		s.emit(Event{Kind: EventElected, Token: term.Token(), Reason: "elected: this node enqueues the ticks"})
		tctx, end := context.WithCancelCause(term.Context())
		l.begin(term, end)
		s.mu.Lock()
		jobs := append([]*job(nil), s.jobs...)
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() { j.loop(tctx) })
		}
		if s.cfg.Catalog != nil {
			wg.Go(func() { s.bind(tctx) }) // the leader binds the catalog's schedules for its term
		}
		wg.Wait()
		cause := context.Cause(tctx)
		end(nil)
		l.setTerm(nil)
		_ = term.Resign(context.WithoutCancel(ctx))
		if ctx.Err() == nil {
			s.emit(Event{Kind: EventDeposed, Token: term.Token(), Reason: "leadership ended: campaigning again", Err: cause})
		}
	}
}

// errDeposed ends a term whose enqueue the fence refused.
var errDeposed = errors.New("schedule: a newer leader's term has enqueued: this term is over")

// fire enqueues tick f's run, unless it was enqueued before (by this
// leader or an earlier one). The tick's run row, the job, and the check of
// the term token against the election's fence commit together.
func (l *leaderClaimer) fire(ctx context.Context, j *job, f time.Time, oneOff bool, _ *tickClaim) (done <-chan struct{}, retryable bool, err error) {
	term := l.currentTerm()
	if term == nil || term.Err() != nil {
		return nil, false, nil // no longer the leader: the next term's loops enqueue
	}
	st, err := l.open(ctx)
	if err != nil {
		return nil, true, err
	}
	var (
		inserted, refused bool
		res               *queue.Enqueued
	)
	// Not cut off when the term or the scheduler ends: a cancelled commit
	// can land and still report an error, and the tick's enqueue would go
	// unreported. The fence, not the context, decides whether a deposed
	// leader's enqueue lands.
	cctx, cancel := claimContext(ctx)
	defer cancel()
	err = pgx.BeginFunc(cctx, l.cfg.Pool, func(tx pgx.Tx) (err error) {
		inserted, refused, res, err = l.enqueueTx(cctx, tx, st, term, j, f, oneOff)
		return err
	})
	switch {
	case errors.Is(err, aegis.ErrStale):
		j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: f, Token: term.Token(), Reason: "the enqueue was fenced out: a newer leader has enqueued", Err: err})
		l.depose(errDeposed)
		return nil, false, nil
	case errors.Is(err, aegis.ErrInvalid):
		return nil, false, err
	case err != nil:
		return nil, true, err
	case refused:
		j.s.emit(Event{Kind: EventRefused, Job: j.Name, Fire: f, Reason: refusal(oneOff)})
		j.s.lookBack()
		return nil, false, nil
	case !inserted:
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "enqueued before (the run key is taken)"})
	case res.Duplicate:
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: fmt.Sprintf("overlap forbid: job %d of a previous tick is still queued or running", res.Job.ID)})
	default:
		j.s.emit(Event{Kind: EventEnqueued, Job: j.Name, Fire: f, Token: runToken(f) - 1, Reason: fmt.Sprintf("queue job %d", res.Job.ID)})
	}
	if inserted {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := st.prune(fctx, j.Name, f.Add(-j.s.cfg.Retention)); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Reason: "prune", Err: err})
		}
	}
	return nil, false, nil
}

// enqueueTx is fire's transaction: the check of the term's token against
// the fence, the catalog half (refused: the row refuses tick f), the
// tick's run row (inserted false: enqueued before) and its queue job
// (res).
func (l *leaderClaimer) enqueueTx(ctx context.Context, tx pgx.Tx, st *Store, term *elect.Leadership, j *job, f time.Time, oneOff bool) (inserted, refused bool, res *queue.Enqueued, err error) {
	// The leader's writes carry its term token: once a newer term has
	// enqueued, a deposed leader (paused past its lease) enqueues
	// nothing.
	if err := l.fence.Check(ctx, tx, l.fenced, term.Token()); err != nil {
		return false, false, nil, err
	}
	if j.bound != nil {
		// The catalog half: the row share-locked until the enqueue
		// commits, so a pause that returned is seen.
		cat := j.s.cfg.Catalog
		spec, tz := j.bound.sched.specAt(f)
		var args string
		var version int64
		err := tx.QueryRow(ctx, cat.q.check+" FOR SHARE", cat.ns, j.Name, f.UnixMilli(), spec, tz, oneOff).Scan(&args, &version)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, true, nil, nil
		}
		if err != nil {
			return false, false, nil, err
		}
	}
	tag, err := tx.Exec(ctx, st.q.enqueue, j.Name, f.UnixMilli(), int64(runToken(f)-1), j.s.cfg.Node, st.ns)
	if err != nil {
		return false, false, nil, err
	}
	if inserted = tag.RowsAffected() == 1; !inserted {
		return false, false, nil, nil // enqueued before: once ever
	}
	key := j.Name
	if j.Overlap == OverlapAllow {
		key = j.Name + "@" + f.UTC().Format(time.RFC3339Nano)
	}
	res, err = l.enqueue.EnqueueTx(ctx, tx, runArgs{Job: j.Name, Namespace: st.ns, FireMS: f.UnixMilli(), Catalog: j.bound != nil}, &queue.EnqueueOpts{
		Queue:       l.cfg.Queue,
		UniqueKey:   key,
		MaxAttempts: j.MaxAttempts,
	})
	if err != nil {
		return true, false, res, err
	}
	if res.Duplicate { // overlap forbid: a run of the job is still queued or running
		_, err = tx.Exec(ctx, st.q.skip, j.Name, f.UnixMilli(), st.ns)
	}
	return true, false, res, err
}

// runArgs are the args of a run's queue job.
type runArgs struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace,omitempty"` // empty: the default namespace
	FireMS    int64  `json:"fire_ms"`
	Catalog   bool   `json:"catalog,omitempty"` // a catalog schedule's run: its handler is the row's
}

// runKind is the queue kind of leader mode's runs.
const runKind = "aegis_schedule_run"

func (runArgs) Kind() string { return runKind }

// AddWorker registers, in ws, the worker that runs this scheduler's jobs
// when their runs come out of the queue (leader mode). Register it in the
// queue.Workers of every replica that works (a queue.Client that works
// Config.Leader.Queue); every such replica must Add the same jobs. A
// replica may work without campaigning: it Adds the jobs and registers the
// worker, and does not Start.
//
// The worker runs the job with a context that carries the run (RunFrom,
// TokenFrom) and is the queue job's: cancelled when the job's lease is
// lost. It records the outcome in the run table: success in one
// transaction with the job's completion (queue's CompleteTx, fenced by the
// job's token); a job's error (or panic) as failed, not retried (the job
// goes to the queue's dead letters, cancelled). A run whose worker crashed
// or paused past its lease is run again by the queue, up to the job's
// MaxAttempts, with a greater token.
//
// It panics, like queue.AddWorker, when ws already has a worker for the
// kind (two schedulers in one Workers); it returns an error outside
// leader mode.
func (s *Scheduler) AddWorker(ws *queue.Workers) error {
	// Workers are leader mode's own API, not a claimer's part: found by
	// the claimer's type, the one place outside New that asks.
	l, ok := s.claim.(*leaderClaimer)
	if !ok {
		return invalid("schedule: AddWorker is for leader mode (Config.Leader)")
	}
	if ws == nil {
		return invalid("schedule: AddWorker: ws is nil")
	}
	queue.AddWorker(ws, queue.WorkFunc[runArgs](l.work))
	return nil
}

// work runs one run that came out of the queue.
func (l *leaderClaimer) work(ctx context.Context, qj *queue.Job[runArgs]) error {
	s := l.s
	if ns := cmp.Or(qj.Args.Namespace, DefaultNamespace); ns != s.ns {
		return queue.Cancel(fmt.Errorf("schedule: a run of namespace %q came to node %s of namespace %q: give each namespace its own Leader.Queue", ns, s.cfg.Node, s.ns))
	}
	st, err := l.open(ctx)
	if err != nil {
		return err
	}
	fire := time.UnixMilli(qj.Args.FireMS).UTC()
	var (
		j *job
		c claimed
	)
	if qj.Args.Catalog {
		var ok bool
		if j, c, ok, err = s.catalogWork(ctx, qj.Args.Job); err != nil {
			return err
		}
		if !ok {
			// Paused or deleted since the tick was enqueued: the run was
			// not yet claimed, so it does not run.
			if _, err := st.db.ExecContext(ctx, st.q.skip, qj.Args.Job, qj.Args.FireMS, st.ns); err != nil {
				return err
			}
			s.emit(Event{Kind: EventRefused, Job: qj.Args.Job, Fire: fire, Reason: "the catalog refused the run: the schedule was paused or deleted after its tick was enqueued"})
			return nil
		}
	} else if j = s.lookup(qj.Args.Job); j == nil {
		return fmt.Errorf("schedule: job %q is not added on node %s", qj.Args.Job, s.cfg.Node)
	}
	run := Run{Job: j.Name, Namespace: s.ns, Fire: fire, Node: s.cfg.Node, Token: runToken(fire) - 1 + qj.Token, Attempt: qj.Attempt, Args: c.args, Version: c.version}
	s.emit(Event{Kind: EventRun, Job: j.Name, Fire: fire, Token: run.Token, Attempt: run.Attempt})
	jobErr := j.call(withRun(ctx, run))
	lost := errors.Is(context.Cause(ctx), aegis.ErrLost)
	if lost {
		s.emit(Event{Kind: EventLost, Job: j.Name, Fire: fire, Token: run.Token, Attempt: run.Attempt, Err: context.Cause(ctx)})
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	started := qj.AttemptedAt
	var result error
	// The outcome is written as internal/outcome writes it: retried for a
	// while with the same token, its text storable, a lost reply read back.
	record := outcome.Write{
		Deadline: time.Now().Add(5 * time.Second),
		Refused:  func(err error) bool { return errors.Is(err, aegis.ErrStale) },
		Landed: func(ctx context.Context, texts []string) (bool, error) {
			t, state, text, err := st.ended(ctx, j.Name, fire)
			return err == nil && t == run.Token && state != "enqueued" && slices.Contains(texts, text), err
		},
		Log: func(msg string, args ...any) {
			s.log.Warn("schedule: "+msg, append([]any{"job", j.Name, "fire", fire, "token", run.Token}, args...)...)
		},
	}
	switch {
	case jobErr == nil:
		// The outcome and the completion commit together, fenced by the
		// job's token.
		record.Try = func(ctx context.Context, _ string) error {
			return pgx.BeginFunc(ctx, l.cfg.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, st.q.record, j.Name, qj.Args.FireMS, int64(run.Token), s.cfg.Node, run.Attempt, "succeeded", started, "", st.ns); err != nil {
					return err
				}
				return qj.CompleteTx(ctx, tx)
			})
		}
		result = record.Do().Err
	case lost:
		// Taken over: the queue writes nothing more for this claim; the
		// new claim records the outcome.
		result = jobErr
	default:
		record.Text = jobErr.Error()
		record.Try = func(ctx context.Context, text string) error {
			_, err := st.db.ExecContext(ctx, st.q.record, j.Name, qj.Args.FireMS, int64(run.Token), s.cfg.Node, run.Attempt, "failed", started, text, st.ns)
			return err
		}
		if res := record.Do(); res.Err != nil {
			s.emit(Event{Kind: EventError, Job: j.Name, Fire: fire, Token: run.Token, Reason: "record the outcome", Err: res.Err})
		}
		result = queue.Cancel(jobErr)
	}
	if refused := jobErr == nil && errors.Is(result, aegis.ErrStale); refused || lost {
		s.takenOver(wctx, st, run, qj.Args.FireMS, started, refused)
	}
	if jobErr == nil && errors.Is(result, aegis.ErrStale) {
		s.emit(Event{Kind: EventLost, Job: j.Name, Fire: fire, Token: run.Token, Attempt: run.Attempt,
			Reason: "the run was reclaimed: its outcome and completion are refused", Err: result})
		s.emit(Event{Kind: EventTwice, Job: j.Name, Fire: fire, Token: run.Token, Attempt: run.Attempt,
			Reason: "the run ended succeeded after a later claim had taken the tick"})
	} else if jobErr == nil && result != nil {
		s.emit(Event{Kind: EventError, Job: j.Name, Fire: fire, Token: run.Token, Reason: "record the outcome; the queue runs it again", Err: result})
	}
	s.emit(Event{Kind: EventDone, Job: j.Name, Fire: fire, Token: run.Token, Attempt: run.Attempt, Err: jobErr})
	return result
}

// takenOver records a worker's attempt whose claim a later one took over
// (refused: it ran to its end and its outcome was refused; else lost: its
// context ended), which the run row's fence keeps out of the run table.
func (s *Scheduler) takenOver(ctx context.Context, st *Store, run Run, fireMS int64, started time.Time, refused bool) {
	ended, text := "lost", "the queue's lease of the run was lost: a later claim runs the tick"
	if refused {
		ended, text = "refused", "the run ended succeeded after a later claim had taken the tick; the store kept that claim's outcome"
	}
	if _, err := st.db.ExecContext(ctx, st.q.takenOver, st.ns, run.Job, fireMS, int64(run.Token), run.Attempt, s.cfg.Node, ended, started, text); err != nil {
		s.emit(Event{Kind: EventError, Job: run.Job, Fire: run.Fire, Token: run.Token, Reason: "record a taken-over attempt", Err: err})
	}
}

// catalogWork is a catalog run's job on a worker, from the schedule's row
// now: ok false when the schedule is paused or deleted. A worker without
// the handler returns an error: the queue retries the run (up to its
// MaxAttempts), on whichever worker claims it.
func (s *Scheduler) catalogWork(ctx context.Context, name string) (*job, claimed, bool, error) {
	cat := s.cfg.Catalog
	if cat == nil {
		return nil, claimed{}, false, fmt.Errorf("schedule: node %s has no Config.Catalog to run catalog schedule %q", s.cfg.Node, name)
	}
	var r row
	err := r.scan(cat.db.QueryRowContext(ctx, cat.q.get, cat.ns, name))
	if errors.Is(err, sql.ErrNoRows) || err == nil && !r.enabled {
		return nil, claimed{}, false, nil
	}
	if err != nil {
		return nil, claimed{}, false, err
	}
	s.mu.Lock()
	h := s.handlers[r.handler]
	s.mu.Unlock()
	if h == nil {
		return nil, claimed{}, false, fmt.Errorf("schedule: node %s has no handler %q for catalog schedule %q", s.cfg.Node, r.handler, name)
	}
	e, err := r.entry(cat.ns)
	if err != nil {
		return nil, claimed{}, false, err
	}
	// A worker's job runs, it does not fire: it needs no schedule.
	j := &job{Job: e.job(nil, func(ctx context.Context) error {
		run, _ := RunFrom(ctx)
		return h(ctx, run.Args)
	}), s: s}
	return j, claimed{args: json.RawMessage(r.args), version: r.version}, true, nil
}

// depose ends the current term's loops with cause.
func (l *leaderClaimer) depose(cause error) {
	l.mu.Lock()
	end := l.endTerm
	l.mu.Unlock()
	if end != nil {
		end(cause)
	}
}

// lookup returns the job called name.
func (s *Scheduler) lookup(name string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.Name == name {
			return j
		}
	}
	return nil
}
