package etcdlease

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
)

// probeTimeout bounds each dial of dialProblems.
const probeTimeout = 500 * time.Millisecond

// dialProblems dials every endpoint once, at the same time, and describes
// those that fail ("" when every one answers): a request that timed out
// against a cluster that is down then says "connection refused" and where,
// not only "context deadline exceeded".
func dialProblems(endpoints []string) string {
	problems := make([]string, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		addr, ok := hostPort(ep)
		if !ok {
			continue
		}
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", addr, probeTimeout)
			if err != nil {
				problems[i] = "etcd endpoint " + ep + ": " + err.Error()
				return
			}
			_ = c.Close()
		})
	}
	wg.Wait()
	var out []string
	for _, p := range problems {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

// hostPort is the TCP address of an etcd endpoint ("host:port" or a URL
// with a scheme); false for a unix socket or anything else it cannot dial.
func hostPort(ep string) (string, bool) {
	if !strings.Contains(ep, "://") {
		return ep, ep != ""
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", false
	}
	return u.Host, true
}
