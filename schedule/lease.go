package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

// leaseClaimer is lease mode's claimer (Config.Locker, ShedLock's
// semantics): a tick runs on the node that acquires the job's lease.
type leaseClaimer struct {
	s      *Scheduler
	locker aegis.Locker
}

var _ claimer = (*leaseClaimer)(nil)

func newLeaseClaimer(s *Scheduler) (*leaseClaimer, error) {
	// No run table: the namespace is the Catalog's, or the default.
	if err := s.setNamespace("", ""); err != nil {
		return nil, err
	}
	return &leaseClaimer{s: s, locker: s.cfg.Locker}, nil
}

// check allows every option: lease mode is the most permissive.
func (lc *leaseClaimer) check(Job) error { return nil }

func (lc *leaseClaimer) prepare(context.Context) error { return nil }

// start starts nothing: the job loops and the binder are all.
func (lc *leaseClaimer) ownsLoops() bool { return false }

func (lc *leaseClaimer) start(context.Context) {}

// replace cancels this node's runs of the job and waits for them, so that
// the job's lease is released when the tick asks for it (one elsewhere
// makes the tick a skip).
func (lc *leaseClaimer) replace(j *job, prev []*active) {
	for _, a := range prev {
		a.cancel(errReplaced)
	}
	// The job's lease is released when the predecessor returns.
	for _, a := range prev {
		select {
		case <-a.done:
		case <-time.After(j.LockAtMostFor):
		}
	}
}

func (lc *leaseClaimer) enqueues() bool { return false }

func (lc *leaseClaimer) runStore() *Store { return nil }

func (lc *leaseClaimer) mode() Mode { return ModeLease }

func (lc *leaseClaimer) close() {}

// fire runs tick f under the job's lease, if this node acquires it.
func (lc *leaseClaimer) fire(ctx context.Context, j *job, f time.Time, oneOff bool, _ *tickClaim) (done <-chan struct{}, retryable bool, err error) {
	locker := lc.locker
	key := j.key()
	if j.Overlap == OverlapAllow {
		key += "@" + f.UTC().Format(time.RFC3339Nano)
	}
	start := time.Now()
	cctx, cancel := claimContext(ctx)
	lease, err := locker.TryAcquire(cctx, key, j.LockAtMostFor)
	cancel()
	if err == nil && j.runContext(ctx).Err() != nil {
		// Stopping: run nothing new, and free the key at once.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := locker.Release(rctx, lease); err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: lease.Token, Reason: "release a lease acquired while stopping", Err: err})
		}
		return nil, false, nil
	}
	if errors.Is(err, aegis.ErrHeld) {
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "the job's lease is held"})
		return nil, false, nil
	}
	if err != nil {
		return nil, !errors.Is(err, aegis.ErrInvalid), err
	}
	if late := j.s.cfg.Clock.Now().Sub(f); late > j.startBy(f, oneOff) {
		// A grant that came this late (the lease server was slow, or a
		// row lock held it up) may follow another replica's whole run of
		// the tick, its lease released after LockAtLeastFor: running it
		// now would run the tick twice.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = locker.Release(rctx, lease)
		j.s.emit(Event{Kind: EventMisfired, Job: j.Name, Fire: f, Token: lease.Token, Attempt: 1,
			Reason: fmt.Sprintf("the lease was granted %s after the fire time, past the starting deadline %s: another replica may have run the tick", late.Round(time.Millisecond), j.startBy(f, oneOff))})
		return nil, false, nil
	}
	var c claimed
	if j.bound != nil {
		var ok bool
		if c, ok, err = lc.claimCatalog(ctx, j, f, oneOff, lease); err != nil {
			return nil, true, err
		}
		if !ok {
			return nil, false, nil
		}
	}
	run := Run{Job: j.Name, Namespace: j.s.ns, Fire: f, Node: j.s.cfg.Node, Token: lease.Token, Attempt: 1, Args: c.args, Version: c.version}
	// The run's context carries its lease (LeaseFrom).
	withLease := context.WithValue(j.runContext(ctx), leaseKey{}, *lease)
	done = j.launch(withLease, run, lease, start.Add(j.LockAtMostFor), locker, func(jobErr error, held *aegis.Held) {
		// ShedLock's lockAtLeastFor: keep the lease until start+LockAtLeastFor.
		keep := j.LockAtLeastFor - time.Since(start)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var err error
		switch {
		case held != nil:
			err = held.ReleaseAfter(fctx, keep) // a keep too short to renew for releases
		case driver.CheckTTL(keep, 0) == nil: // else too short to renew for: release
			err = locker.Renew(fctx, lease, keep)
		default:
			err = locker.Release(fctx, lease)
		}
		if errors.Is(err, aegis.ErrLost) {
			j.s.emit(Event{Kind: EventLost, Job: j.Name, Fire: f, Token: lease.Token, Reason: "the lease had expired when the run ended", Err: err})
		} else if err != nil {
			j.s.emit(Event{Kind: EventError, Job: j.Name, Fire: f, Token: lease.Token, Reason: "release", Err: err})
		}
	})
	return done, false, nil
}

// claimCatalog is the catalog half of the claim of a catalog job's tick
// f, once the lease is ours: a pause or delete that committed before it is
// seen. A run now is taken: the lease alone would not keep a replica that
// saw the request after another's run had ended from running it again.
// When ok is false the lease is released, and without err the refusal (or
// the run now's skip) is reported.
func (lc *leaseClaimer) claimCatalog(ctx context.Context, j *job, f time.Time, oneOff bool, lease *aegis.Lease) (c claimed, ok bool, err error) {
	cctx, cancel := claimContext(ctx)
	if oneOff {
		c, ok, err = j.s.takeRunNow(cctx, j, f)
	} else {
		c, ok, err = j.s.checkCatalog(cctx, j.s.cfg.Catalog.db, j, f, false)
	}
	cancel()
	if err != nil || !ok {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = lc.locker.Release(rctx, lease)
	}
	if err != nil {
		return c, false, err
	}
	if !ok && oneOff {
		j.s.emit(Event{Kind: EventSkipped, Job: j.Name, Fire: f, Reason: "another replica took the run now, a later RunNow replaced it, or the schedule was paused or deleted"})
		return c, false, nil
	}
	if !ok {
		j.s.emit(Event{Kind: EventRefused, Job: j.Name, Fire: f, Reason: refusal(false)})
		j.s.lookBack()
		return c, false, nil
	}
	return c, true, nil
}

// key is the job's lease key in lease mode: its name, after its namespace
// unless that is the default one.
func (j *job) key() string {
	if j.s.ns == DefaultNamespace {
		return j.Name
	}
	return j.s.ns + "/" + j.Name
}
