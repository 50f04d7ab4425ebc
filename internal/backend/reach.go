package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// dialTimeout bounds the check that a server answers at all.
const dialTimeout = 2 * time.Second

// reachable checks, before a client is built on them, that at least need
// of the servers at addrs accept a TCP connection: the clients themselves
// retry a refused connection until a context ends and then say only
// "context deadline exceeded" (etcd), hang in the background (ZooKeeper)
// or log every retry (go-redis). The error names each server that did not
// answer, and why (connection refused, no answer within the bound).
func reachable(ctx context.Context, what string, addrs []string, need int) error {
	type result struct {
		addr string
		err  error
	}
	results := make(chan result, len(addrs))
	for _, a := range addrs {
		go func() {
			d := net.Dialer{Timeout: dialTimeout}
			c, err := d.DialContext(ctx, "tcp", hostPort(a))
			if err == nil {
				c.Close()
			}
			results <- result{a, err}
		}()
	}
	ok := 0
	var failed []string
	for range addrs {
		r := <-results // each dial ends within dialTimeout
		if r.err == nil {
			ok++
			continue
		}
		failed = append(failed, hostPort(r.addr)+": "+dialCause(r.err))
	}
	slices.Sort(failed)
	if ok >= need {
		return nil
	}
	if need == 1 {
		return fmt.Errorf("%s: no server answers: %s", what, strings.Join(failed, "; "))
	}
	return fmt.Errorf("%s: %d of %d servers answer, %d needed: %s", what, ok, len(addrs), need, strings.Join(failed, "; "))
}

// hostPort is the host:port of an address or an endpoint URL
// (http://host:port).
func hostPort(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		return u.Host
	}
	return addr
}

func dialCause(err error) string {
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "no answer (" + err.Error() + ")"
	case errors.As(err, &op):
		if op.Timeout() {
			return fmt.Sprintf("no answer within %s", dialTimeout)
		}
		return op.Err.Error()
	}
	return err.Error()
}
