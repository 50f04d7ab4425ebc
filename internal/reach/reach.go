// Package reach dials servers to say why a client got no answer. The
// clients Aegis builds on retry a refused connection until a context ends
// and then report only "context deadline exceeded" (etcd), hang in the
// background (ZooKeeper) or hide the dial behind a timeout (go-redis); one
// TCP dial of each server, made only after a call failed or before a
// client is built, names the server and the cause ("connection refused").
package reach

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Dial opens and closes one TCP connection to address (host:port) on
// network ("tcp" when empty), bounded by timeout and ctx. It returns nil
// when the server accepts, and otherwise an error whose text says why, in
// the words of [Cause].
func Dial(ctx context.Context, network, address string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, cmp.Or(network, "tcp"), address)
	if err != nil {
		return &dialError{addr: address, timeout: timeout, err: err}
	}
	_ = c.Close()
	return nil
}

// ErrNotTCP is All's error for an address it cannot dial: neither
// host:port nor an http(s) URL (a unix socket, say).
var ErrNotTCP = errors.New("not a TCP address")

// All dials every address at once (see [Dial]) and returns their errors,
// index by index; nil where the server accepted. Addresses may be URLs
// (http://host:port), as etcd endpoints are.
func All(ctx context.Context, addrs []string, timeout time.Duration) []error {
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		hp, ok := HostPort(a)
		if !ok {
			errs[i] = ErrNotTCP
			continue
		}
		wg.Go(func() { errs[i] = Dial(ctx, "tcp", hp, timeout) })
	}
	wg.Wait()
	return errs
}

// HostPort is the TCP address of a host:port or of an http(s) URL; false
// for anything else it cannot dial (a unix socket, an empty string).
func HostPort(addr string) (string, bool) {
	if !strings.Contains(addr, "://") {
		return addr, addr != ""
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", false
	}
	return u.Host, true
}

// dialError is a failed dial, worded by Cause.
type dialError struct {
	addr    string
	timeout time.Duration
	err     error
}

func (e *dialError) Error() string { return Cause(e.err, e.timeout) }
func (e *dialError) Unwrap() error { return e.err }

// Cause words a dial error for a person: "connection refused", "no answer
// within 2s", or the system's own words.
func Cause(err error, timeout time.Duration) string {
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "no answer (" + err.Error() + ")"
	case errors.As(err, &op):
		if op.Timeout() {
			return fmt.Sprintf("no answer within %s", timeout)
		}
		return op.Err.Error()
	}
	return err.Error()
}
