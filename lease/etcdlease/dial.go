package etcdlease

import (
	"context"
	"errors"
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
			out = append(out, "etcd endpoint "+endpoints[i]+": "+err.Error())
		}
	}
	return strings.Join(out, "; ")
}
