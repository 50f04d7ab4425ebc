package queue

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aegislab/aegis/internal/errtext"
)

// ErrNotFound is returned for a job id that names no job (or no job in the
// state the call needs).
var ErrNotFound = errors.New("queue: job not found")

// Pause stops every client from claiming jobs of queue, from their next
// claim on (the claim statement checks it). Running jobs go on. Pausing a
// paused queue, or one no job was ever enqueued in, is fine.
func (c *Client) Pause(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, true)
}

// Resume lets clients claim jobs of queue again and wakes their idle
// workers.
func (c *Client) Resume(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, false)
}

func (c *Client) setPaused(ctx context.Context, queue string, paused bool) error {
	if err := checkQueue(queue); err != nil {
		return invalid("pause/resume: %v", err)
	}
	var ignored bool
	if err := c.db.QueryRow(ctx, c.stmt(pauseSQL), queue, paused).Scan(&ignored); err != nil {
		return fmt.Errorf("queue: pause/resume %q: %w", queue, translate(err))
	}
	return nil
}

// Paused tells whether queue is paused.
func (c *Client) Paused(ctx context.Context, queue string) (bool, error) {
	if err := checkQueue(queue); err != nil {
		return false, invalid("paused: %v", err)
	}
	var paused bool
	if err := c.db.QueryRow(ctx, c.stmt(pausedSQL), queue).Scan(&paused); err != nil {
		return false, fmt.Errorf("queue: paused %q: %w", queue, translate(err))
	}
	return paused, nil
}

// DeadFilter selects dead letters for DeadJobs.
type DeadFilter struct {
	// Queue selects one queue; "" means every queue.
	Queue string
	// Before selects jobs with ids below it, for paging (pass the last id
	// of the previous page); 0 means from the newest.
	Before int64
	// Limit is the most jobs returned: default 100, at most 10000.
	Limit int
}

// DeadJobs lists the dead letters (cancelled and discarded jobs), newest
// first, with their errors.
func (c *Client) DeadJobs(ctx context.Context, f *DeadFilter) ([]*JobRow, error) {
	var o DeadFilter
	if f != nil {
		o = *f
	}
	if o.Queue != "" {
		if err := checkQueue(o.Queue); err != nil {
			return nil, invalid("DeadJobs: DeadFilter.Queue: %v", err)
		}
	}
	if o.Limit < 0 || o.Limit > 10000 {
		return nil, invalid("DeadJobs: DeadFilter.Limit %d: must be between 0 (100) and 10000", o.Limit)
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	if o.Before <= 0 {
		o.Before = math.MaxInt64
	}
	rows, err := c.db.Query(ctx, c.stmt(deadSQL), o.Queue, o.Before, o.Limit)
	if err != nil {
		return nil, fmt.Errorf("queue: dead jobs: %w", translate(err))
	}
	defer rows.Close()
	var jobs []*JobRow
	for rows.Next() {
		j, err := scanJob(rows, true)
		if err != nil {
			return nil, fmt.Errorf("queue: dead jobs: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: dead jobs: %w", translate(err))
	}
	return jobs, nil
}

// RetryDead moves a dead letter back into its queue, available at once,
// with a fresh count of attempts and a greater token; its past errors are
// kept. ErrNotFound when id is not a dead letter; an error when a live job
// holds its unique key.
func (c *Client) RetryDead(ctx context.Context, id int64) (*JobRow, error) {
	j, err := scanInserted(c.db.QueryRow(ctx, c.stmt(retryDeadSQL), id))
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("%w: %d is not a dead letter", ErrNotFound, id)
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		return nil, fmt.Errorf("queue: retry dead job %d: a live job holds its unique key", id)
	case err != nil:
		return nil, fmt.Errorf("queue: retry dead job %d: %w", id, translate(err))
	}
	return j, nil
}

// CancelJob cancels a live job: it goes to the dead letters (state
// cancelled, reason recorded) with a greater token. If a worker is running
// it, that worker's lease is lost: its next heartbeat cancels the
// handler's context (aegis.ErrLost) and nothing it writes for the job
// lands. ErrNotFound when id is not a live job. The reason is stored as
// errtext.Clean makes it (valid UTF-8, no NUL, at most 4 KiB).
func (c *Client) CancelJob(ctx context.Context, id int64, reason string) error {
	if reason == "" {
		reason = "cancelled by Client.CancelJob"
	}
	tag, err := c.db.Exec(ctx, c.stmt(cancelSQL), id, errtext.Clean(reason))
	if err != nil {
		return fmt.Errorf("queue: cancel job %d: %w", id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %d is not a live job", ErrNotFound, id)
	}
	return nil
}

// Job returns the job with id, live or finished (completed jobs only while
// they are kept: Config.CompletedRetention). ErrNotFound when there is none.
func (c *Client) Job(ctx context.Context, id int64) (*JobRow, error) {
	j, err := scanJob(c.db.QueryRow(ctx, c.stmt(jobSQL), id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: job %d: %w", id, translate(err))
	}
	return j, nil
}

// discardDeadSQL deletes a dead letter for good (the statement sits here,
// beside the one function that runs it).
const discardDeadSQL = `DELETE FROM aegis_job_finished WHERE id = $1 AND state <> 'completed'`

// DiscardDead deletes a dead letter (a cancelled or discarded job) for
// good: it can no longer be retried. It refuses every other job with an
// error matching ErrNotFound that says what the job is (a live job is
// cancelled first, with CancelJob; a completed one is left to
// Config.CompletedRetention).
func (c *Client) DiscardDead(ctx context.Context, id int64) error {
	tag, err := c.db.Exec(ctx, c.stmt(discardDeadSQL), id)
	if err != nil {
		return fmt.Errorf("queue: discard dead job %d: %w", id, translate(err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Nothing deleted: say why, on this error path only.
	j, err := c.Job(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: %d is not a dead letter (there is no such job)", ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("queue: discard dead job %d: %w", id, err)
	case j.State == StateCompleted:
		return fmt.Errorf("%w: %d is completed, not a dead letter", ErrNotFound, id)
	}
	return fmt.Errorf("%w: %d is %s, not a dead letter: cancel it first (CancelJob)", ErrNotFound, id, j.State)
}
