package queue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis/internal/backoff"
)

// listener holds one connection, taken out of the pool, that LISTENs on
// the schema's channel and wakes the producer of the queue named in each
// notification. When the connection breaks it reconnects with backoff;
// meanwhile the producers poll. After a reconnect it wakes every producer,
// since notifications were missed.
type listener struct {
	c    *Client
	conn *pgx.Conn
}

func newListener(c *Client) *listener { return &listener{c: c} }

func (l *listener) connect(ctx context.Context) error {
	pc, err := l.c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // held for good: it must not go back to the pool LISTENing
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.c.channel}.Sanitize()); err != nil {
		l.closeConn(conn)
		return err
	}
	l.conn = conn
	return nil
}

func (l *listener) closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func (l *listener) run(ctx context.Context) {
	defer func() {
		if l.conn != nil {
			l.closeConn(l.conn)
		}
	}()
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	failures := 0
	for {
		if l.conn == nil {
			if err := l.connect(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				d := retry.Delay(failures)
				failures++
				l.c.log.Warn("queue: listen failed; polling meanwhile", "err", err, "retry_in", d)
				select {
				case <-time.After(d):
					continue
				case <-ctx.Done():
					return
				}
			}
			failures = 0
			for _, p := range l.c.producers {
				p.wakeup()
			}
		}
		n, err := l.conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.c.log.Warn("queue: listen connection lost; reconnecting", "err", err)
			l.closeConn(l.conn)
			l.conn = nil
			continue
		}
		if p := l.c.producers[n.Payload]; p != nil {
			p.wakeup()
		}
	}
}
