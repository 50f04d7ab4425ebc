package queue

import (
	"context"
	"sync"
	"time"

	"github.com/aegislab/aegis/internal/backoff"
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

	mu    sync.Mutex
	busy  int
	freed chan struct{} // a slot was freed
	wake  chan struct{} // a notification, or a reconnect of the listener
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
	return p.max - p.busy
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
		n := p.free()
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
	}
}

// claim claims up to n jobs and starts their handlers.
func (p *producer) claim(ctx context.Context, n int) ([]*JobRow, error) {
	c := p.c
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// A claim that started finishes even when Stop begins meanwhile: its
	// jobs are then run (Stop waits for them), not left claimed by no one
	// until their leases expire.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	start := time.Now()
	jobs, err := c.sql.claim(qctx, c.pool, p.queue, n)
	c.metrics.claimSeconds(p.queue).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	c.metrics.claimed(p.queue).Add(float64(len(jobs)))
	p.mu.Lock()
	p.busy += len(jobs)
	p.mu.Unlock()
	runs := make([]*run, len(jobs))
	c.mu.Lock()
	for i, j := range jobs {
		r := &run{client: c, row: j}
		r.ctx, r.cancel = context.WithCancelCause(c.base)
		j.run = r
		r.timer = time.AfterFunc(time.Until(localDeadline(start, c.cfg.Lease)), r.expired)
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
