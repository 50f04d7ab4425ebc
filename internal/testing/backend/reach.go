package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/reach"
)

// dialTimeout bounds the check that a server answers at all.
const dialTimeout = 2 * time.Second

// reachable checks, before a client is built on them, that at least need
// of the servers at addrs accept a TCP connection (see package reach for
// why the clients cannot say it themselves). The error names each server
// that did not answer, and why (connection refused, no answer within the
// bound).
func reachable(ctx context.Context, what string, addrs []string, need int) error {
	ok := 0
	var failed []string
	for i, err := range reach.All(ctx, addrs, dialTimeout) {
		if err == nil {
			ok++
			continue
		}
		failed = append(failed, hostPort(addrs[i])+": "+err.Error())
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
	if hp, ok := reach.HostPort(addr); ok {
		return hp
	}
	return addr
}
