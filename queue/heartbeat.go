package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aegislab/aegis"
)

// heartbeatLoop renews the leases of this client's claims every Lease/3,
// all in one statement, each row fenced by its token. A claim the
// statement refused is lost: its handler's context is cancelled with a
// cause that wraps aegis.ErrLost (and the refusal, aegis.ErrStale) and
// nothing more is written for it. When the database
// cannot be reached, the local deadlines of the claims pass and cancel
// their handlers (ErrLeaseExpired) before the leases can expire on the
// server.
func (c *Client) heartbeatLoop(ctx context.Context) {
	interval := c.cfg.Lease / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h := c.cfg.hooks; h != nil && h.heartbeat != nil {
			h.heartbeat()
		}
		next := interval
		if err := c.heartbeat(ctx, interval); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Error("queue: heartbeat failed; retrying", "err", err)
			next = interval / 4
		}
		t.Reset(next)
	}
}

// heartbeat renews every claim whose handler runs or whose completion is
// queued.
func (c *Client) heartbeat(ctx context.Context, timeout time.Duration) error {
	var ids, tokens []int64
	var runs []*run
	c.mu.Lock()
	for _, r := range c.runs {
		if ph := r.phase.Load(); ph == phaseWorking || ph == phasePending {
			runs = append(runs, r)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(runs, func(a, b *run) int { return cmp.Compare(a.row.ID, b.row.ID) })
	for _, r := range runs {
		ids = append(ids, r.row.ID)
		tokens = append(tokens, int64(r.row.Token))
	}
	if len(ids) == 0 {
		return nil
	}
	start := time.Now()
	loop := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := c.sql.heartbeat(ctx, c.db, ids, tokens)
	if err != nil {
		if c.tracer != nil && loop.Err() == nil { // a stopping client's heartbeat is no failure
			c.traceHeartbeatErr(start, len(ids), err)
		}
		return err
	}
	until := localDeadline(start, c.cfg.Lease)
	deadline := time.Until(until)
	for i, r := range runs {
		j := r.row
		switch {
		case res[i] == nil:
			r.until.Store(until.UnixNano())
			if r.phase.Load() == phaseWorking {
				r.timer.Reset(deadline)
			}
			continue
		case errors.Is(res[i], errRowLocked):
			continue // locked by a statement that is finishing it, or taking it over: next round tells
		}
		// Refused: the token moved on. The lease is lost, unless the
		// handler is done (a completion may have deleted the row since the
		// claims were listed).
		if r.lose(fmt.Errorf("queue: job %d lost its lease: %w: %w", j.ID, aegis.ErrLost, res[i])) {
			c.metrics.leasesLost(j.Queue).Inc()
			c.metrics.stale(j.Queue, "heartbeat").Inc()
			if c.tracer != nil {
				c.traceLost(r, start)
			}
			c.log.Warn("queue: lease lost: the job was taken over; cancelling its handler",
				"job_id", j.ID, "queue", j.Queue, "kind", j.Kind, "token", j.Token, "err", res[i])
		}
	}
	return nil
}
