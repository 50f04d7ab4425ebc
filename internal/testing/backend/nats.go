package backend

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/natslease"
)

// openNATS is natslease on the NATS cluster at s.NATSURLs, its bucket
// replicated on three servers (natslease's default; a cluster of fewer
// refuses it at Open), through the servers given only.
func openNATS(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	urls := nonEmpty(s.NATSURLs)
	if len(urls) == 0 {
		return nil, nil, fmt.Errorf("nats: %w: no server (AEGIS_NATS_URLS or --nats-urls)", aegis.ErrInvalid)
	}
	hosts := make([]string, len(urls))
	for i, u := range urls {
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "nats" || p.Host == "" {
			return nil, nil, fmt.Errorf("nats: %w: server %d is not a nats://host:port URL (not shown: it may carry a password)", aegis.ErrInvalid, i+1)
		}
		hosts[i] = p.Host
	}
	if err := reachable(ctx, "nats", hosts, 1); err != nil {
		return nil, nil, err
	}
	// The servers given are the only ones dialled: the addresses the
	// cluster advertises are ignored, so that a client given proxies (the
	// lab's, which cut a node off) never goes round them on a reconnect.
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Timeout(dialTimeout), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.IgnoreDiscoveredServers(), nats.Name("aegis"))
	if err != nil {
		return nil, nil, fmt.Errorf("nats: connect to %s: %w", strings.Join(hosts, ","), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("nats: %w", err)
	}
	l, err := natslease.New(js, nil)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return l, nc.Close, nil
}
