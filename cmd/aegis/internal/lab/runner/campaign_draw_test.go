package runner_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// Every run a campaign draws is one its nodes take: for every strategy,
// many draws pass the lab's checks, and the lease TTL of each is granted
// by the strategy's own backend on the shared servers, opened as a node
// opens it (an etcd TTL of 760ms was drawn, and every node exited on it).
func TestCampaignDrawsWhatNodesTake(t *testing.T) {
	t.Parallel()
	for _, s := range lab.Strategies {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			ttls := map[time.Duration]bool{}
			for seed := range uint64(5) {
				cfgs, err := runner.Campaign{Seed: seed + 1, Runs: 40, Fence: true}.Configs(s.Name)
				require.NoError(t, err)
				for _, c := range cfgs {
					require.NoError(t, c.Validate(), "%+v", c)
					require.NoError(t, s.CheckTTL(c.TTL), "%+v", c)
					require.NoError(t, driver.CheckTTL(c.TTL, 0), "%+v", c)
					ttls[c.TTL] = true
				}
			}
			if s.Mode != schedule.ModeLease || s.LabLocked() {
				return // no backend of its own: the lab's Lockers take any TTL driver.CheckTTL does
			}
			srv := backend.Servers{PostgresURL: testenv.PostgresURL(t), RedisAddrs: testenv.RedisAddrs(t), EtcdEndpoints: testenv.EtcdEndpoints(t),
				ZKServers: testenv.ZKServers(t), NATSURLs: testenv.NATSURLs(t), SQLitePath: filepath.Join(t.TempDir(), "lease.db")}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			key := testenv.Key(t)
			for _, ttl := range slices.Sorted(func(yield func(time.Duration) bool) {
				for ttl := range ttls {
					if !yield(ttl) {
						return
					}
				}
			}) {
				srv.ZKSessionTimeout = ttl // as the node does
				l, closeFn, err := backend.Open(ctx, s.Backend, srv)
				require.NoError(t, err, "ttl %s", ttl)
				// A key of its own per TTL, left to expire: a short TTL's
				// Redlock may answer too late on a loaded machine (no
				// quorum), which says nothing of the TTL; a refusal of it
				// is aegis.ErrInvalid.
				lease, err := l.TryAcquire(ctx, key+"-"+ttl.String(), ttl)
				require.NotErrorIs(t, err, aegis.ErrInvalid, "%s's backend takes the drawn ttl %s", s.Name, ttl)
				if err == nil {
					_ = l.Release(ctx, lease)
				}
				closeFn()
			}
		})
	}
}
