package schedule

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/errtext"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/outcome"
	"github.com/aegislab/aegis/internal/owner"
	"github.com/aegislab/aegis/tracing"
)

// runKeyClaimer is run-key mode's claimer (Config.Store): a tick is a run
// row keyed by (job, fire time), and the node whose insert lands runs it;
// a reaper retries the crashed runs.
type runKeyClaimer struct {
	s        *Scheduler
	st       *Store
	claimSQL string // the catalog claim (PostgreSQL), when Config.Catalog is set
}

var _ claimer = (*runKeyClaimer)(nil)

func newRunKeyClaimer(s *Scheduler) (*runKeyClaimer, error) {
	st := s.cfg.Store
	if err := s.setNamespace(st.ns, "the Store's namespace (StoreConfig.Namespace)"); err != nil {
		return nil, err
	}
	rk := &runKeyClaimer{s: s, st: st}
	if s.cfg.Catalog != nil {
		if s.cfg.Catalog.dialect != st.dialect {
			return nil, invalid("schedule: Config.Catalog and Config.Store are on different databases (one PostgreSQL, one SQLite): a claim checks the catalog in the statement that inserts the run")
		}
		rk.claimSQL = fmt.Sprintf(claimCatalogPG, st.table, s.cfg.Catalog.q.check)
	}
	return rk, nil
}

// check refuses LockAtLeastFor: a run key already stops a second run of a
// tick.
func (rk *runKeyClaimer) check(j Job) error { return j.leaseOnly() }

// prepare fails when the Store's database does not have the Catalog's
// table: the claim reads both in one statement. That alone is the
// configuration's mistake (aegis.ErrInvalid); a database that cannot be
// read (down, its pool closed) is returned as such.
func (rk *runKeyClaimer) prepare(ctx context.Context) error {
	if rk.s.cfg.Catalog == nil {
		return nil
	}
	table := rk.s.cfg.Catalog.table
	var n int
	err := rk.st.db.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE false").Scan(&n)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "42P01", // undefined_table
		rk.st.dialect == migrate.SQLite && strings.Contains(err.Error(), "no such table"):
		return invalid("schedule: Config.Catalog must be on the Store's database (a claim checks the catalog in the statement that inserts the run): %w", err)
	}
	return fmt.Errorf("schedule: Start: read the catalog table %s on the Store's database: %w", table, err)
}

// start starts the reaper.
func (rk *runKeyClaimer) ownsLoops() bool { return false }

func (rk *runKeyClaimer) start(ctx context.Context) {
	rk.s.wg.Go(func() { rk.reap(ctx) })
}

// replace leaves the predecessors running: fire cancels them once the
// replace statement has ended their rows (cancelReplaced). Cancelled
// first, a predecessor could record its end before the replace, and its
// row said failed, not replaced.
func (rk *runKeyClaimer) replace(*job, []*active) {}

func (rk *runKeyClaimer) enqueues() bool { return false }

func (rk *runKeyClaimer) runStore() *Store { return rk.st }

func (rk *runKeyClaimer) mode() Mode { return ModeRunKey }

func (rk *runKeyClaimer) close() {}

// fire claims tick f's run row and runs it if this node won.
func (rk *runKeyClaimer) fire(ctx context.Context, j *job, f time.Time, oneOff bool, tc *tickClaim) (done <-chan struct{}, retryable bool, err error) {
	st := rk.st
	start := time.Now() // before the claim is sent: the local deadline's start
	cctx, cancel := claimContext(ctx)
	var (
		c            claimed
		token        aegis.Token
		state        string
		won, refused bool
	)
	if tc.maybe {
		// An earlier try may have landed: the row it took says so.
		token, state, _, won, err = st.mine(cctx, j.Name, f, tc.owner)
		if err != nil {
			cancel()
			return nil, true, err
		}
		tc.maybe = false
		if won && j.bound != nil {
			c = claimed{args: j.bound.args, version: j.bound.version}
		}
		if won {
			j.s.log.Warn("schedule: a claim's reply was lost after it committed: its run row is this node's, and it runs", "job", j.Name, "fire", f, "token", token)
		}
	}
	switch {
	case won:
	case j.bound != nil:
		c, token, state, won, refused, err = rk.claimCatalog(cctx, j, f, oneOff, j.LockAtMostFor, j.Overlap == OverlapForbid, tc.owner)
	default:
		token, state, won, err = st.claim(cctx, j.Name, f, j.s.cfg.Node, j.LockAtMostFor, j.Overlap == OverlapForbid, tc.owner)
	}
	cancel()
	if err != nil {
		tc.maybe = outcome.MaybeLanded(err)
		return nil, true, err
	}
	switch {
	case refused:
		j.s.emit(Event{Kind: EventRefused, Job: j.Name, Fire: f, Reason: refusal(oneOff)})
		j.s.misses.note(j.Name, f, f, CausePaused, "the catalog refused the tick: "+refusal(oneOff))
		j.s.lookBack()
		return nil, false, nil
	case won && state == "running" && j.runContext(ctx).Err() != nil:
		rk.handBack(ctx, j.Name, f, token)
		return nil, false, nil
	case !won:
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "another node has the tick"})
		return nil, false, nil
	case state == "skipped":
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Token: token, Reason: "overlap forbid: a run of the job is still going"})
		return nil, false, nil
	}
	if j.Overlap == OverlapReplace {
		if n, err := st.replace(ctx, j.Name, f); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Err: err})
		} else if n > 0 {
			j.s.emit(Event{Kind: EventRun, Job: j.Name, Fire: f, Token: token, Reason: fmt.Sprintf("replaced %d running predecessors", n)})
		}
		// A predecessor on this node stops now (one elsewhere learns at its
		// next heartbeat). After a failed replace it stops too: the tick
		// replaces it either way, and its later writes carry the older
		// token.
		j.cancelReplaced(f)
	}
	return rk.startRun(j.runContext(ctx), j, f, token, 1, start, c), false, nil
}

// startRun runs a claimed (or reclaimed) run row of j in a goroutine; c
// is what a catalog job's claim read from its row.
func (rk *runKeyClaimer) startRun(ctx context.Context, j *job, f time.Time, token aegis.Token, attempt int, start time.Time, c claimed) <-chan struct{} {
	st := rk.st
	lease := &aegis.Lease{Key: j.Name, Token: token, Owner: j.s.cfg.Node, TTL: j.LockAtMostFor, Deadline: driver.LocalDeadline(start, j.LockAtMostFor)}
	run := Run{Job: j.Name, Namespace: j.s.ns, Fire: f, Node: j.s.cfg.Node, Token: token, Attempt: attempt, Args: c.args, Version: c.version}
	return j.launch(ctx, run, lease, start.Add(j.LockAtMostFor), &runRow{s: st, job: j.Name, fire: f}, func(jobErr error, held *aegis.Held) {
		state, text := "succeeded", ""
		if jobErr != nil {
			state, text = "failed", jobErr.Error()
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if held != nil {
			_ = held.Release(fctx) // stops the heartbeat; a run row's Release writes nothing
		}
		deadline := lease.Deadline
		if held != nil {
			deadline = held.Lease().Deadline
		}
		res := rk.finish(j, f, token, state, text, deadline)
		if err := res.Err; errors.Is(err, aegis.ErrLost) {
			j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "the run was reclaimed or replaced: its outcome is not recorded", Err: err})
			rk.refused(fctx, j, f, token, attempt, state, res.Text)
		} else if err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: token, Err: err})
		} else if err := st.prune(fctx, j.Name, f.Add(-j.s.cfg.Retention)); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Reason: "prune", Err: err})
		}
	})
}

// finish records a run's outcome on its run row, fenced by its token
// (internal/outcome): retried until the run's lease runs out (deadline),
// its text made storable, a finish whose reply was lost read back.
func (rk *runKeyClaimer) finish(j *job, f time.Time, token aegis.Token, state, text string, deadline time.Time) outcome.Result {
	st := rk.st
	return outcome.Write{
		Text:     text,
		Deadline: deadline,
		Try: func(ctx context.Context, text string) error {
			return st.finish(ctx, j.Name, f, token, state, text)
		},
		Refused: func(err error) bool { return errors.Is(err, aegis.ErrLost) },
		Landed: func(ctx context.Context, texts []string) (bool, error) {
			t, s, text, err := st.ended(ctx, j.Name, f)
			return err == nil && t == token && s == state && slices.Contains(texts, text), err
		},
		Log: func(msg string, args ...any) {
			j.s.log.Warn("schedule: "+msg, append([]any{"job", j.Name, "fire", f, "token", token, "state", state}, args...)...)
		},
	}.Do()
}

// refused records on its attempt the end of a run whose outcome the run
// row refused; when a later attempt had taken the tick (not a replace or
// an abandon), the tick ran twice: EventTwice.
func (rk *runKeyClaimer) refused(ctx context.Context, j *job, f time.Time, token aegis.Token, attempt int, state, text string) {
	end := "the run ended " + state
	if text != "" {
		end += ": " + text
	}
	twice, err := rk.st.refuse(ctx, j.Name, f, token, errtext.Clean(end+"; a later attempt had taken the tick, and the store kept that attempt's outcome"))
	switch {
	case err != nil:
		j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "record a refused outcome", Err: err})
	case twice:
		j.s.emit(Event{Kind: EventTwice, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: end + " after a later attempt had taken the tick"})
	}
}

// claimCatalog is run-key mode's claim of a catalog schedule's tick: the
// catalog's check and the run row's insert in one statement (PostgreSQL)
// or one transaction (SQLite). refused is true when the catalog refused
// the tick (paused, deleted, or changed at this fire time); won false when
// another node has the tick.
func (rk *runKeyClaimer) claimCatalog(ctx context.Context, j *job, f time.Time, oneOff bool, ttl time.Duration, forbid bool, owner string) (c claimed, token aegis.Token, state string, won, refused bool, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("schedule: claim %q at %s: %w", j.Name, f.UTC().Format(time.RFC3339Nano), err)
		}
	}()
	s, st, cat := rk.s, rk.st, rk.s.cfg.Catalog
	spec, tz := j.bound.sched.specAt(f)
	check := []any{cat.ns, j.Name, f.UnixMilli(), spec, tz, oneOff}
	if st.dialect == migrate.Postgres {
		var (
			args         sql.NullString
			version, tok sql.NullInt64
			st8          sql.NullString
		)
		err = st.db.QueryRowContext(ctx, rk.claimSQL, append(check, int64(runToken(f)), s.cfg.Node, ttl.Milliseconds(), forbid, owner)...).Scan(&args, &version, &tok, &st8)
		if err != nil {
			return c, 0, "", false, false, err
		}
		if !args.Valid {
			return c, 0, "", false, true, nil
		}
		c = claimed{args: json.RawMessage(args.String), version: version.Int64}
		if !tok.Valid {
			return c, 0, "", false, false, nil
		}
		return c, aegis.Token(tok.Int64), st8.String, true, false, nil
	}
	err = inTx(ctx, st.db, st.dialect, func(tx execer) error {
		var args string
		if err := tx.QueryRowContext(ctx, cat.q.check, check...).Scan(&args, &c.version); errors.Is(err, sql.ErrNoRows) {
			refused = true
			return nil
		} else if err != nil {
			return err
		}
		c.args = json.RawMessage(args)
		var t int64
		err := tx.QueryRowContext(ctx, st.q.claim, j.Name, f.UnixMilli(), int64(runToken(f)), s.cfg.Node, ttl.Milliseconds(), forbid, st.ns, owner).Scan(&t, &state)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		token, won = aegis.Token(t), true
		return nil
	})
	return c, token, state, won, refused, err
}

// reclaim takes over tick f's expired run row of j, under a new owner.
// When its reply is lost (it may have landed), the row is read back by
// that owner, until ctx ends: a reclaim that landed unknown would leave
// the row to expire again, an attempt that never ran.
func (rk *runKeyClaimer) reclaim(ctx context.Context, j *job, f time.Time) (token aegis.Token, state string, attempt int, ok bool, err error) {
	id := owner.New()
	token, state, attempt, ok, err = rk.st.reclaim(ctx, j.Name, f, rk.s.cfg.Node, j.LockAtMostFor, j.MaxAttempts, id)
	for try := 0; outcome.MaybeLanded(err); try++ {
		if !backoff.Sleep(ctx, outcome.Retry.Delay(try)) {
			return 0, "", 0, false, err
		}
		var rerr error
		if token, state, attempt, ok, rerr = rk.st.mine(ctx, j.Name, f, id); rerr == nil {
			if ok {
				rk.s.log.Warn("schedule: a reclaim's reply was lost after it committed: its run row is this node's", "job", j.Name, "fire", f, "token", token)
			}
			return token, state, attempt, ok, nil
		}
	}
	return token, state, attempt, ok, err
}

// claimTimeout bounds a claim that Stop does not cut off.
const claimTimeout = 5 * time.Second

// claimContext is the context of a claim (a run row's insert or reclaim, a
// lease's grant): Stop does not cancel it, so its outcome is known. A
// cancelled commit can land in the store and still report an error: the
// row (or lease) then said this node ran a tick that it never started,
// and blocked the tick until its expiry (SQLite showed it, about one stop
// in twenty that came during a claim).
func claimContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
}

// handBack gives a run row claimed while stopping to the reapers: its
// expiry is now, so a live replica's reaper runs the tick (with a greater
// token) at its next pass, instead of after LockAtMostFor.
func (rk *runKeyClaimer) handBack(ctx context.Context, job string, f time.Time, token aegis.Token) {
	s := rk.s
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := rk.st.handBack(hctx, job, f, token); err != nil {
		s.emit(Event{Kind: EventError, Job: job, Fire: f, Token: token, Reason: "hand back a run claimed while stopping", Err: err})
		return
	}
	s.emit(Event{Kind: EventSkipped, Job: job, Fire: f, Token: token, Reason: "stopping: the run is handed back to the reapers"})
}

// reap retries the crashed runs of this scheduler's jobs.
func (rk *runKeyClaimer) reap(ctx context.Context) {
	s := rk.s
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if gone := s.goneNames(); len(gone) > 0 {
			// A crashed run of a paused or deleted schedule is not retried:
			// no claim may start after the pause, a reclaim included. Its
			// row says so instead of staying running.
			if n, err := rk.st.abandon(ctx, gone); err != nil && ctx.Err() == nil && !isReadOnly(err) {
				s.emit(Event{Kind: EventError, Reason: "reaper: abandon the crashed runs of paused or deleted schedules", Err: err})
			} else if n > 0 {
				s.emit(Event{Kind: EventReclaim, Reason: fmt.Sprintf("abandoned %d crashed runs of paused or deleted catalog schedules", n)})
			}
		}
		jobs := make(map[string]*job)
		var names []string
		for _, j := range s.reapable() {
			jobs[j.Name] = j
			names = append(names, j.Name)
		}
		if len(names) == 0 {
			continue
		}
		runs, err := rk.st.expired(ctx, names)
		if err != nil {
			if ctx.Err() == nil && !isReadOnly(err) {
				s.emit(Event{Kind: EventError, Reason: "reaper", Err: err})
			}
			continue
		}
		for _, r := range runs {
			j, f := jobs[r.job], r.fire
			if ctx.Err() != nil {
				return
			}
			start := time.Now()
			rctx, span := ctx, trace.SpanFromContext(context.Background())
			if s.tracer != nil {
				rctx, span = tracing.Start(ctx, s.tracer, "aegis.schedule.reclaim", tracing.Key(j.Name), tracing.Node(s.cfg.Node),
					tracing.AttrFire.String(f.UTC().Format(time.RFC3339Nano)))
			}
			cctx, cancel := claimContext(rctx)
			token, state, attempt, ok, err := rk.reclaim(cctx, j, f)
			cancel()
			tracing.Fail(span, err)
			span.SetAttributes(tracing.AttrClaimedTick.Bool(ok && state == "running"), tracing.Token(token))
			span.End()
			switch {
			case isReadOnly(err): // a standby: the primary's reapers retry it
			case err != nil:
				s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Reason: "reaper", Err: err})
			case !ok:
			case state == "running" && ctx.Err() != nil:
				rk.handBack(ctx, j.Name, f, token)
			case state == "running":
				s.emit(Event{Kind: EventReclaim, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "retrying a crashed run"})
				var c claimed
				if j.bound != nil {
					c = claimed{args: j.bound.args, version: j.bound.version}
				}
				rk.startRun(rctx, j, f, token, attempt, start, c)
			default:
				s.emit(Event{Kind: EventReclaim, Job: j.Name, Fire: f, Token: token, Attempt: attempt, Reason: "abandoned: out of attempts, or a later tick started"})
			}
		}
	}
}
