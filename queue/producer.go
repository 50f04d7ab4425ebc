package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/owner"
)

// producer claims the jobs of one queue for this client: as many as it has
// free worker slots, in one statement. While the queue has a backlog (the
// last claim filled every free slot) it claims again as soon as a slot is
// free; the claims that run while slots free up batch them. When the queue
// is drained it waits for a notification or the poll interval.
type producer struct {
	c       *Client
	queue   string
	max     int       // jobs claimed and not finished: MaxWorkers + ClaimAhead
	runs    chan *run // claimed jobs for the workers; never full (max)
	workers int       // goroutines that run handlers (MaxWorkers)

	mu       sync.Mutex
	busy     int           // claimed and not finished
	reserved int           // slots the claims in flight may fill
	inflight int           // claims in flight
	freed    chan struct{} // a slot was freed
	wake     chan struct{} // a notification, or a reconnect of the listener

	handlerNanos atomic.Int64 // a moving average of the handlers' run times (see gather)
}

func newProducer(c *Client, queue string, q QueueConfig) *producer {
	max := q.MaxWorkers + q.ClaimAhead
	return &producer{c: c, queue: queue, max: max, runs: make(chan *run, max), workers: q.MaxWorkers,
		freed: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
}

// work runs the queue's handlers on long-lived goroutines until runs is
// closed: a goroutine per job would start on a small stack and grow it in
// every job (json.Unmarshal of the args alone copied the stack: 30% of the
// client's CPU in a burn-down).
func (p *producer) work() {
	for r := range p.runs {
		p.c.work(p, r)
	}
}

// wakeup asks the producer to claim now.
func (p *producer) wakeup() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *producer) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max - p.busy - p.reserved
}

// claimers is how many claim loops the queue runs. With jobs claimed
// ahead, two claims in flight keep the buffer full while one claim's round
// trip is under way (each takes at least a quarter of the slots, see
// reserve). Without, a second loop only splits the free slots into
// smaller claims (measured: more CPU per job, no more jobs/s).
func (p *producer) claimers() int {
	if p.max > p.workers && p.workers >= 4 {
		return 2
	}
	return 1
}

// reserve takes the free slots for a claim, or 0 when it should wait:
// none is free, or another claim is in flight and fewer than a quarter of
// the slots are free (a claim of a few jobs would cost a round trip for
// little).
func (p *producer) reserve() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.max - p.busy - p.reserved
	if n == 0 || (p.inflight > 0 && n < max(p.max/4, 1)) {
		return 0
	}
	p.reserved += n
	p.inflight++
	return n
}

// settle ends a claim of n reserved slots that claimed got jobs.
func (p *producer) settle(n, got int) {
	p.mu.Lock()
	p.reserved -= n
	p.inflight--
	p.busy += got
	p.mu.Unlock()
	if got < n {
		select { // another claimer may use the slots left over
		case p.freed <- struct{}{}:
		default:
		}
	}
}

// release frees a worker slot.
func (p *producer) release() {
	p.mu.Lock()
	p.busy--
	p.mu.Unlock()
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

func (p *producer) run(ctx context.Context) {
	poll := time.NewTicker(p.c.cfg.PollInterval)
	defer poll.Stop()
	errBackoff := backoff.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}
	failures := 0
	more := true // claim at once: there may be a backlog
	for {
		if p.free() == 0 {
			select {
			case <-p.freed:
				continue
			case <-ctx.Done():
				return
			}
		}
		if !more {
			select {
			case <-p.wake:
			case <-poll.C:
			case <-ctx.Done():
				return
			}
		}
		// This claim serves any notification that is pending now; one that
		// arrives while it runs triggers the next.
		select {
		case <-p.wake:
		default:
		}
		n := p.reserve()
		if n == 0 {
			select {
			case <-p.freed:
				continue
			case <-ctx.Done():
				return
			}
		}
		claimStart := time.Now()
		jobs, err := p.claim(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := errBackoff.Delay(failures - 1)
			p.c.log.Error("queue: claim failed", "queue", p.queue, "err", err, "retry_in", d)
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
			more = true
			continue
		}
		failures = 0
		more = len(jobs) == n
		if more {
			if d, ok := p.gatherFor(time.Since(claimStart)); ok {
				p.gather(ctx, d)
			}
		}
	}
}

// observe adds a handler's run time to the moving average gatherFor reads
// (a sixteenth of each new run; concurrent updates may drop one, which
// an average can spare).
func (p *producer) observe(d time.Duration) {
	old := p.handlerNanos.Load()
	p.handlerNanos.Store(old + (int64(d)-old)/16)
}

// gatherFor tells, after a claim that took claim and filled every slot
// it asked for (a backlog), whether the next claim should wait for the
// slots its jobs hold, and for how long at most. Jobs far shorter than a
// claim free their slots while the next claim would be under way, so
// that claims alternate between the slots that happened to be free
// (measured: claims of 49 jobs for 100 workers); a claim's cost is
// mostly per row on the server, but its round trip and commit are per
// claim, so waiting a fraction of a claim for every slot makes claims of
// all the slots and halves the claims per job (50,000 no-op jobs, 100
// workers: claims of 96–98 jobs instead of 49, 14–19 instead of 17–21 µs
// of the server's CPU per job; docs/queue.md, Claim). Jobs about as long as a claim would leave
// their slots idle meanwhile (1 ms jobs: 8% fewer jobs/s), so it waits
// only for jobs shorter than a quarter of a claim. A queue that claims
// ahead keeps two claims in flight instead, and does not wait.
func (p *producer) gatherFor(claim time.Duration) (time.Duration, bool) {
	if p.claimers() > 1 || time.Duration(p.handlerNanos.Load()) >= claim/4 {
		return 0, false
	}
	return claim, true
}

// gather waits until every slot is free, for d at most.
func (p *producer) gather(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for p.free() < p.max {
		select {
		case <-p.freed:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// claim claims up to n jobs and starts their handlers.
func (p *producer) claim(ctx context.Context, n int) ([]*JobRow, error) {
	c := p.c
	got := 0
	defer func() { p.settle(n, got) }()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// A claim that started finishes even when Stop begins meanwhile: its
	// jobs are then run (Stop waits for them), not left claimed by no one
	// until their leases expire.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	start := time.Now()
	id := owner.New()
	jobs, err := c.sql.claim(qctx, c.db, p.queue, n, id)
	c.metrics.claimSeconds(p.queue).Observe(time.Since(start).Seconds())
	if err != nil && !pgconn.SafeToRetry(err) {
		jobs, err = p.adopt(ctx, id, start, err)
	}
	var claim trace.SpanContext
	if c.tracer != nil {
		claim = c.traceClaim(p.queue, start, len(jobs), err)
	}
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	c.metrics.claimed(p.queue).Add(float64(len(jobs)))
	got = len(jobs)
	runs := make([]*run, len(jobs))
	c.mu.Lock()
	for i, j := range jobs {
		r := &run{client: c, row: j, claim: claim}
		r.ctx, r.cancel = context.WithCancelCause(c.base)
		j.run = r
		deadline := localDeadline(start, c.cfg.Lease)
		r.until.Store(deadline.UnixNano())
		r.timer = time.AfterFunc(time.Until(deadline), r.expired)
		c.runs[j.ID] = r
		runs[i] = r
	}
	c.jobsWG.Add(len(runs))
	c.mu.Unlock()
	for _, r := range runs {
		p.runs <- r // never blocks: busy counts them, and busy ≤ max
	}
	return jobs, nil
}

// adopt finds the jobs of a claim whose statement failed after it may
// have been sent (err): the claim may have committed with its reply lost,
// and then its jobs are this client's, running, and nobody would start
// them until their leases expired (the reaper would count an attempt that
// never ran, and discard a job on its last attempt). The claim's id
// finds them. It retries the read until the claim's local deadline, or
// until Stop; after that the reaper takes whatever the claim held. It
// returns the claim's error when the claim held nothing.
func (p *producer) adopt(ctx context.Context, id string, start time.Time, err error) ([]*JobRow, error) {
	c := p.c
	deadline := localDeadline(start, c.cfg.Lease)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		jobs, aerr := c.sql.adopt(actx, c.db, p.queue, id)
		cancel()
		switch {
		case aerr == nil && len(jobs) == 0:
			return nil, err // the claim did not commit
		case aerr == nil:
			c.log.Warn("queue: a claim committed and its reply was lost: its jobs are run", "queue", p.queue, "jobs", len(jobs), "err", err)
			return jobs, nil
		case ctx.Err() != nil || !time.Now().Add(adoptRetry.Delay(attempt)).Before(deadline):
			return nil, fmt.Errorf("%w; finding the jobs the claim may hold failed too (the reaper takes them when their leases expire): %w", err, aerr)
		}
		if !backoff.Sleep(ctx, adoptRetry.Delay(attempt)) {
			return nil, err
		}
	}
}

// adoptRetry spaces adopt's reads.
var adoptRetry = backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
