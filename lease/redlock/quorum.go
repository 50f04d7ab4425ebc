package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/reach"
	"github.com/aegislab/aegis/internal/redisscript"
)

// tally returns nil when yes reaches the quorum; otherwise a refusal when
// some node said no (ErrHeld for acquire, so that a contender retries;
// ErrLost for renew and release, so that a holder stops even with a node
// down); otherwise an error wrapping ErrNoQuorum that names the nodes'
// failures. The end of ctx wins over both.
func (l *Locker) tally(ctx context.Context, op string, lock redisscript.Lock, key string, rs []reply, yes, no int) error {
	if yes >= l.quorum {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: %s %q: %w", op, key, err)
	}
	if no > 0 && op == "acquire" {
		return aegis.ErrHeld
	}
	l.diagnose(ctx, rs)
	var why []string
	var errs []error
	for i, r := range rs {
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", l.name(i), redisscript.Translate(op, lock, key, r.err)))
		case op != "acquire" && redisscript.Outcome(r.v) != redisscript.Done:
			why = append(why, fmt.Sprintf("%s: %s", l.name(i), redisscript.Outcome(r.v).Reason()))
		}
	}
	if no > 0 {
		for _, err := range errs {
			why = append(why, err.Error())
		}
		return fmt.Errorf("redlock: %s %q: %w: %d of %d nodes hold the lease, %d needed (%s)",
			op, key, aegis.ErrLost, yes, len(rs), l.quorum, strings.Join(why, "; "))
	}
	return fmt.Errorf("redlock: %s %q: %d of %d nodes agreed, %d needed: %w: %w",
		op, key, yes, len(rs), l.quorum, ErrNoQuorum, errors.Join(errs...))
}

// name names node i in errors: its index and, when its client says, its
// address.
func (l *Locker) name(i int) string {
	if a := addrOf(l.nodes[i]); a != "" {
		_, a, _ = strings.Cut(a, " ")
		return fmt.Sprintf("node %d (%s)", i, a)
	}
	return fmt.Sprintf("node %d", i)
}

// reply is one node's answer to one operation.
type reply struct {
	v   int64
	err error
}

// each runs f on every node at once and returns their replies, in node
// order; a node that does not answer within timeout gets a timeout error.
// It returns early when ctx ends.
func (l *Locker) each(ctx context.Context, timeout time.Duration, f func(ctx context.Context, node int) (int64, error)) []reply {
	return l.eachOf(ctx, timeout, nil, f)
}

// eachOf is each on the nodes i with which[i] (all when which is nil).
func (l *Locker) eachOf(ctx context.Context, timeout time.Duration, which []bool, f func(ctx context.Context, node int) (int64, error)) []reply {
	type answer struct {
		i int
		reply
	}
	rs := make([]reply, len(l.nodes))
	answers := make(chan answer, len(l.nodes))
	nctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := 0
	for i := range l.nodes {
		if which != nil && !which[i] {
			continue
		}
		pending++
		rs[i].err = errNoAnswer
		l.calls.Go(func() {
			v, err := f(nctx, i)
			answers <- answer{i, reply{v: v, err: err}}
		})
	}
wait:
	for ; pending > 0; pending-- {
		select {
		case a := <-answers:
			rs[a.i] = a.reply
		case <-nctx.Done():
			break wait
		}
	}
	// A node that timed out did not answer; its context error is not the
	// caller's (tally reports the caller's own end separately).
	for i := range rs {
		if errors.Is(rs[i].err, errNoAnswer) || errors.Is(rs[i].err, context.DeadlineExceeded) && ctx.Err() == nil {
			rs[i].err = &noAnswer{within: timeout}
		}
	}
	return rs
}

// script runs call on node i through the node's coalescer, which sends it
// in one pipeline with the calls of this Locker's other operations in
// flight at the same time; undo is the grant of an acquire call, released
// if it lands after ctx ended. The error is ctx's or the call's own.
func (l *Locker) script(ctx context.Context, i int, call redisscript.Call, undo redisscript.Grant) (*redis.Cmd, error) {
	cmd, err := l.coalescers[i].Do(ctx, call, undo)
	if err != nil {
		return nil, err
	}
	return cmd, cmd.Err()
}

// dial connects to node i's address, bounded by timeout, and returns the
// error when it cannot (refused, unreachable); nil when it can, or when
// the client does not say its address.
func (l *Locker) dial(ctx context.Context, i int, timeout time.Duration) error {
	a := addrOf(l.nodes[i])
	if a == "" || ctx.Err() != nil {
		return nil
	}
	network, address, _ := strings.Cut(a, " ")
	return reach.Dial(ctx, network, address, timeout)
}

var errNoAnswer = errors.New("no answer")

// noAnswer is the error of a node that did not answer in time, with the
// reason found by dialling it, if any.
type noAnswer struct {
	within time.Duration
	dial   error
}

func (e *noAnswer) Error() string {
	if e.dial != nil {
		return fmt.Sprintf("no answer within %s: %v", e.within, e.dial)
	}
	return fmt.Sprintf("no answer within %s", e.within)
}

func (e *noAnswer) Unwrap() []error { return []error{errNoAnswer, e.dial} }

// diagnose dials the nodes that did not answer, at once: go-redis hides
// why (it retries a refused dial until the context ends), and "connection
// refused" says more than a timeout. It runs only when a call fails.
func (l *Locker) diagnose(ctx context.Context, rs []reply) {
	var wg sync.WaitGroup
	for i := range rs {
		if e, ok := rs[i].err.(*noAnswer); ok {
			wg.Go(func() { e.dial = l.dial(ctx, i, e.within) })
		}
	}
	wg.Wait()
}
