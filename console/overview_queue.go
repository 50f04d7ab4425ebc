package console

import (
	"context"
	"strconv"
	"time"

	"github.com/aegislab/aegis/queue"
)

// overdueGrace is how long past due a waiting job is overdue
// (queue.Inspector.Overdue): a working queue claims an available job as
// soon as a worker has room and promotes a due scheduled one within its
// ReapInterval (1s by default), so 30s is many rounds of both.
const overdueGrace = 30 * time.Second

// oldestShown bounds the queues on the oldest-waiting card and on the
// overdue list.
const oldestShown = 10

// queueCards are the overview's cards of the queue: absent (Present
// false) where there is no queue, on SQLite or without its tables.
type queueCards struct {
	Present bool
	queue.Health
	Grace string
	clock
}

func (s *Server) queueCards(ctx context.Context, now time.Time) (queueCards, error) {
	d := queueCards{Grace: overdueGrace.String(), clock: clock{now}}
	sqlite, missing, err := s.queueMissing(ctx)
	if err != nil || sqlite || missing != "" {
		return d, err
	}
	h, err := s.st.queueTables.Health(ctx, overdueGrace, oldestShown)
	if err != nil {
		return d, err
	}
	d.Present, d.Health = true, *h
	return d, nil
}

// Count prints a count of queue.Inspector.Health, which stops past
// queue.CountLimit.
func (queueCards) Count(n int64) string {
	if n > queue.CountLimit {
		return "more than " + strconv.Itoa(queue.CountLimit)
	}
	return strconv.FormatInt(n, 10)
}

// clock prints the queue pages' times relative to the database's now;
// the templates put the absolute time (instant) in the title.
type clock struct{ Now time.Time }

// When is t relative to now: "12m00s ago", "in 3.5s", "—" for none.
func (c clock) When(t time.Time) string {
	switch {
	case t.IsZero():
		return "—"
	case t.After(c.Now):
		return left(c.Now, t)
	}
	return ago(c.Now, t)
}

// Since is how long ago t was, without "ago": "stuck 12m00s".
func (c clock) Since(t time.Time) string { return short(max(c.Now.Sub(t), 0)) }

// Until is a lease's end: "in 12s", "expired 3.0s ago", "—" for none.
func (c clock) Until(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return left(c.Now, t)
}
