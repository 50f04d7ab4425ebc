package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/reach"
)

// probeTimeout bounds each dial of dialProblems.
const probeTimeout = 500 * time.Millisecond

// dialProblems dials every endpoint once, at the same time, and describes
// those that fail ("" when every one answers): a request that timed out
// against a cluster that is down then says "connection refused" and where,
// not only "context deadline exceeded".
func dialProblems(endpoints []string) string {
	var out []string
	for i, err := range reach.All(context.Background(), endpoints, probeTimeout) {
		if err != nil && !errors.Is(err, reach.ErrNotTCP) {
			out = append(out, "etcd endpoint "+hostOf(endpoints[i])+": "+err.Error())
		}
	}
	return strings.Join(out, "; ")
}

// hostOf names an endpoint by its host:port alone: an endpoint URL may
// carry a user and password.
func hostOf(endpoint string) string {
	if hp, ok := reach.HostPort(endpoint); ok {
		return hp
	}
	return "(an endpoint that is not a TCP address)"
}

// noAnswer is the cause of a call's own bound (see bound).
type noAnswer struct{ within time.Duration }

func (e noAnswer) Error() string {
	return fmt.Sprintf("no answer from etcd within %s (Config.RequestTimeout; the context had no deadline)", e.within)
}

// bound limits a call, or Acquire's taking a place in the queue, to
// Config.RequestTimeout when ctx has no deadline: etcd's client waits for a
// connection until the context ends, so context.Background() on an
// unreachable cluster would wait forever. A deadline of the caller's is
// left alone, longer or shorter: Hold, for one, renews until the lease's
// deadline. (Not the TTL: a grant answered a little after it, on a loaded
// machine, still holds a live etcd lease, and a 24 h TTL is no bound.)
func (l *Locker) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, l.requestTimeout, noAnswer{l.requestTimeout})
}

// unreachable says why the cluster did not answer: the endpoints that
// cannot be dialled and why, or, when every one accepts a connection, that
// they accepted and did not answer.
func (l *Locker) unreachable() string {
	eps := l.client.Endpoints()
	if why := dialProblems(eps); why != "" {
		return why
	}
	hosts := make([]string, len(eps))
	for i, ep := range eps {
		hosts[i] = hostOf(ep)
	}
	return "etcd endpoints " + strings.Join(hosts, ", ") + " accept connections and did not answer"
}
