package queue

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/aegislab/aegis/internal/outcome"
)

// completer writes completions in batches: it takes every completion
// queued while the previous batch was being written (up to CompleteBatch)
// and writes them in one statement, each row fenced by its claim's token.
// An idle client writes a completion at once; a busy one writes large
// batches. Jobs keep their heartbeats until their completion is written.
type completer struct {
	c  *Client
	in chan *run
}

func newCompleter(c *Client, buffer int) *completer {
	return &completer{c: c, in: make(chan *run, buffer)}
}

// add queues a completion; it blocks while the buffer is full, which holds
// the job's worker slot and so slows claiming down.
func (k *completer) add(r *run) { k.in <- r }

// close ends run after the queued completions are written. No add may
// follow.
func (k *completer) close() { close(k.in) }

func (k *completer) run() {
	max := k.c.cfg.CompleteBatch
	batch := make([]*run, 0, max)
	for r := range k.in {
		batch = append(batch[:0], r)
	drain:
		for len(batch) < max {
			select {
			case r, ok := <-k.in:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		k.flush(batch)
	}
}

// flush writes one batch. A failed write is retried, with the same
// tokens, until the earliest local deadline of the batch's claims (the
// heartbeats renew them meanwhile) or a lease's length, whichever comes
// first; then the jobs run again when their leases expire. A completion a
// try refused after an earlier try may have landed (its reply was lost)
// is read back (landed).
func (k *completer) flush(batch []*run) {
	c := k.c
	// In id order: the rows are locked in a stable order, near each other.
	slices.SortFunc(batch, func(a, b *run) int { return cmp.Compare(a.row.ID, b.row.ID) })
	ids := make([]int64, len(batch))
	tokens := make([]int64, len(batch))
	for i, r := range batch {
		ids[i], tokens[i] = r.row.ID, int64(r.row.Token)
	}
	start := time.Now()
	giveUp := start.Add(c.cfg.Lease)
	var (
		res   []error
		first error
		maybe bool // a failed try may have landed
	)
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		var err error
		res, err = c.sql.completeBatch(ctx, c.db, ids, tokens)
		cancel()
		if err == nil {
			break
		}
		first = cmp.Or(first, err)
		maybe = maybe || outcome.MaybeLanded(err)
		wait := outcome.Retry.Delay(try - 1)
		if until := time.Now().Add(wait); c.isClosing() || !until.Before(giveUp) || !until.Before(earliest(batch)) {
			c.log.Error("queue: completions not written; the jobs run again when their leases expire", "jobs", len(batch), "tries", try, "err", err)
			for _, r := range batch {
				if c.tracer != nil {
					c.traceWrite(r, "complete", start, len(batch), err)
				}
				c.forget(r)
			}
			return
		}
		c.log.Warn("queue: write completions; retrying", "jobs", len(batch), "try", try, "retry_in", wait, "err", err)
		time.Sleep(wait)
	}
	if first != nil {
		c.log.Warn("queue: completions written after a failed try", "jobs", len(batch), "first_err", first)
	}
	for i, r := range batch {
		j := r.row
		if res[i] != nil && maybe {
			ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			if ok, err := c.landed(ctx, j, "complete", nil); err == nil && ok {
				res[i] = nil
			}
			cancel()
		}
		if c.tracer != nil {
			c.traceWrite(r, "complete", start, len(batch), res[i])
		}
		if res[i] == nil {
			c.metrics.completed(j.Queue).Inc()
		} else {
			c.metrics.stale(j.Queue, "complete").Inc()
			c.log.Warn("queue: stale write rejected: the job's lease was lost (its token is no longer the job's)",
				"op", "complete", "job_id", j.ID, "queue", j.Queue, "kind", j.Kind, "token", j.Token, "err", res[i])
		}
		c.forget(r)
	}
}

// earliest is the earliest local deadline of the batch's claims.
func earliest(batch []*run) time.Time {
	t := batch[0].deadline()
	for _, r := range batch[1:] {
		if d := r.deadline(); d.Before(t) {
			t = d
		}
	}
	return t
}
