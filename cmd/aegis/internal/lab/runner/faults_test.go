package runner_test

import (
	"context"
	"database/sql"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// The servers' faults of lab v2, each in a real run: crash:postgres,
// kill:etcd, kill:zookeeper, the writer target and a partition from one
// server. They assert what each fault does to the servers and the nodes,
// not the per-tick counts of the workload.

// chaosEvent returns the first lab event of kind whose detail contains
// part, failing the test when there is none.
func chaosEvent(t *testing.T, events []lab.Event, kind, part string) lab.Event {
	t.Helper()
	for _, e := range events {
		if e.Kind == kind && strings.Contains(e.Detail, part) {
			return e
		}
	}
	t.Fatalf("no %s event with %q", kind, part)
	return lab.Event{}
}

// executedAfter counts the commits nodes reported after at.
func executedAfter(events []lab.Event, at float64) int {
	n := 0
	for _, e := range events {
		if e.Kind == lab.EventExecuted && e.T > at {
			n++
		}
	}
	return n
}

// ownServers is a session that starts its own server of kind (the fault
// kills it) and uses the shared test servers for the others.
func ownServers(t *testing.T, own servers.Kind) *runner.Session {
	t.Helper()
	testenv.Reserve(t, 2, "a lab session's runs and its own "+string(own))
	given := runner.Servers{
		PostgresURL:   testenv.PostgresURL(t),
		EtcdEndpoints: testenv.EtcdEndpoints(t),
		ZKServers:     testenv.ZKServers(t),
		NATSURLs:      testenv.NATSURLs(t),
	}
	switch own {
	case servers.KindPostgres:
		given.PostgresURL = ""
	case servers.KindEtcd:
		given.EtcdEndpoints = nil
	case servers.KindZooKeeper:
		given.ZKServers = nil
	case servers.KindNATS:
		given.NATSURLs = nil
	}
	s, err := runner.NewSession(runner.Options{Dir: t.TempDir(), Servers: given, NodeEnv: []string{nodeEnv}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// The lab never kills a server it did not start: with the shared test
// servers given, the server faults are refused before any node starts, and
// the error says how to let the lab start its own.
func TestServerFaultsNeedTheLabsOwnServers(t *testing.T) {
	t.Parallel()
	s := session(t)
	for _, tt := range []struct{ strategy, spec, want string }{
		{"pg-lease", "crash:postgres@1s", "kills or restarts the PostgreSQL server, and the lab never touches servers it did not start: leave --postgres-url and AEGIS_POSTGRES_URL unset"},
		{"etcd", "kill:etcd@1s", "leave --etcd-endpoints and AEGIS_ETCD_ENDPOINTS unset"},
		{"zookeeper", "kill:zookeeper@1s", "leave --zk-servers and AEGIS_ZK_SERVERS unset"},
		{"nats", "kill:nats@1s", "leave --nats-urls and AEGIS_NATS_URLS unset"},
	} {
		_, err := s.Start(t.Context(), short(tt.strategy, true, tt.spec))
		require.ErrorContains(t, err, "--chaos "+tt.spec+" kills or restarts", tt.spec)
		require.ErrorContains(t, err, tt.want, tt.spec)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.spec)
	}
}

// crash:postgres kills the lab's durable PostgreSQL under a run and
// restarts it with crash recovery: the run ends, its report is built from
// the store that came back, and every commit a node was told of is still
// there. A second run that would crash the same server meanwhile is
// refused.
func TestCrashPostgres(t *testing.T) {
	t.Parallel()
	s := ownServers(t, servers.KindPostgres)
	c := short("pg-lease", true, "crash:postgres@600ms")
	c.Duration = 10 * c.Tick
	r, err := s.Start(t.Context(), c)
	require.NoError(t, err)
	_, err = s.Start(t.Context(), short("pg-lease", true, "crash:postgres@1s"))
	require.ErrorContains(t, err, "has failed over or restarted the lab's PostgreSQL (or will: its faults do)", "the session admits one run on a server another run's fault holds: none")

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep, err := r.Wait(ctx)
	require.NoError(t, err, "the run ended and its report was built")
	crashed := chaosEvent(t, rep.Events, lab.EventChaos, "crash:postgres@600ms: postgres (pid ")
	require.Contains(t, crashed.Detail, "killed with SIGKILL")
	restarted := chaosEvent(t, rep.Events, lab.EventHealed, "postgres crashed (SIGKILL) and restarted in ")
	require.GreaterOrEqual(t, restarted.T, crashed.T)
	require.Positive(t, rep.Executions)

	// Durable: every commit a node reported is in the store after the
	// crash (with synchronous_commit off, the last ones could be lost).
	st, err := servers.Inspect(t.Context(), s.Dir(), servers.KindPostgres)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Equal(t, servers.StateHealthy, st[0].State, "the lab's PostgreSQL runs again")
	db, err := sql.Open("pgx", "postgres://aegis@"+st[0].Addr+"/aegis?sslmode=disable")
	require.NoError(t, err)
	defer db.Close()
	var rows int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM aegis_lab_audit WHERE run = $1 AND status = 'EXECUTED'`, r.ID).Scan(&rows))
	require.GreaterOrEqual(t, rows, executedAfter(rep.Events, -1e9), "every reported commit survived the crash")
}

// kill:etcd kills the cluster's leader while the nodes hold leases; the
// two others elect a new one, the run goes on, and the killed member
// comes back. A grant in flight when the leader dies waits for etcd's
// request timeout (about 5 s, measured: "etcdserver: request timed out",
// then the tick is a misfire), so the run lasts long enough for the nodes
// to commit after it.
func TestKillEtcdLeader(t *testing.T) {
	t.Parallel()
	c := short("etcd", true, "kill:etcd@800ms")
	c.TTL, c.Duration = time.Second, 24*c.Tick
	rep, _ := run(t, ownServers(t, servers.KindEtcd), c)
	killed := chaosEvent(t, rep.Events, lab.EventChaos, "killed with SIGKILL")
	require.Regexp(t, `^kill:etcd@800ms: etcd leader etcd-\d \(pid \d+\) killed with SIGKILL; it restarts in 2s$`, killed.Detail)
	elected := chaosEvent(t, rep.Events, lab.EventChaos, " leads, elected within ")
	m := regexp.MustCompile(`etcd leader (etcd-\d) killed; (etcd-\d) leads`).FindStringSubmatch(elected.Detail)
	require.NotNil(t, m, elected.Detail)
	require.NotEqual(t, m[1], m[2], "a new leader")
	back := chaosEvent(t, rep.Events, lab.EventHealed, m[1]+" restarted after ")
	requireDown(t, back, 1.9)
	require.Positive(t, executedAfter(rep.Events, elected.T), "the nodes commit under the new leader")
}

// kill:zookeeper kills the member most sessions are on; the clients move
// to the others, the run goes on, and the member comes back.
func TestKillZooKeeperMember(t *testing.T) {
	t.Parallel()
	c := short("zookeeper", true, "kill:zookeeper@800ms")
	// A session outlives its server's death by reconnecting to another
	// member within its timeout (--ttl). Ticks enough after the kill for a
	// loaded machine (the kill itself can land a second late, and grants
	// slow while the clients move).
	c.TTL, c.Duration = 2*time.Second, 24*c.Tick
	rep, _ := run(t, ownServers(t, servers.KindZooKeeper), c)
	killed := chaosEvent(t, rep.Events, lab.EventChaos, "killed with SIGKILL")
	m := regexp.MustCompile(`^kill:zookeeper@800ms: zookeeper member (zookeeper-\d) \((leader|follower), (\d+) of the ensemble's (\d+) client sessions, pid \d+\) killed with SIGKILL`).FindStringSubmatch(killed.Detail)
	require.NotNil(t, m, killed.Detail)
	sessions, _ := strconv.Atoi(m[3])
	total, _ := strconv.Atoi(m[4])
	require.GreaterOrEqual(t, total, c.Nodes, "every node has a session")
	require.GreaterOrEqual(t, 3*sessions, total, "the member with the most of them")
	after := chaosEvent(t, rep.Events, lab.EventChaos, m[1]+" killed; zookeeper-")
	require.Regexp(t, ` (leads, elected within \d+\.\ds|still leads)$`, after.Detail)
	back := chaosEvent(t, rep.Events, lab.EventHealed, m[1]+" restarted after ")
	requireDown(t, back, 1.9)
	require.Positive(t, executedAfter(rep.Events, killed.T), "the nodes commit with a member gone")
}

// pause:writer stops the node inside its write transaction. Latency on
// PostgreSQL makes the write last several 60 ms round trips, so the
// SIGSTOP lands inside it: the node's last event before the pause is its
// writing, and the outcome of that write comes only after it resumes.
func TestPauseWriter(t *testing.T) {
	t.Parallel()
	c := short("pg-lease", true, "latency:postgres=60ms", "pause:writer@600ms+1500ms")
	c.Tick, c.TTL, c.Duration = time.Second, 2*time.Second, 4*time.Second
	rep, _ := run(t, session(t), c)
	i := -1
	for j, e := range rep.Events {
		if e.Kind == lab.EventChaos && strings.HasPrefix(e.Detail, "pause:writer@600ms+1.5s: ") {
			i = j
			break
		}
	}
	require.GreaterOrEqual(t, i, 0, "the pause happened")
	pause := rep.Events[i]
	require.Contains(t, pause.Detail, "paused with SIGSTOP")
	require.Contains(t, pause.Detail, ", the writer, inside its write of ")
	var last lab.Event
	for _, e := range rep.Events[:i] {
		if e.Node == pause.Node && e.Attempt != "" { // its sections' events (a misfire of another tick may come between)
			last = e
		}
	}
	require.Equal(t, lab.EventWriting, last.Kind, "node%d's last section event before its pause", pause.Node)
	var outcome lab.Event
	for _, e := range rep.Events[i:] {
		if e.Attempt == last.Attempt && (e.Kind == lab.EventExecuted || e.Kind == lab.EventStale || e.Kind == lab.EventAbandon) {
			outcome = e
			break
		}
	}
	require.NotEmpty(t, outcome.Kind, "the paused write %s has an outcome", last.Attempt)
	require.Greater(t, outcome.T, pause.T+0.75, "the write %s ended after the pause, not before it landed", last.Attempt)
}

// partition:TARGET@AT+FOR/SERVER cuts the holder from its lease server
// only (etcd; NATS, whose client is given the lab's proxies and ignores
// the servers the cluster advertises): it still reaches the store and
// commits the tick it was in, while it can take no lease and, once its
// lease has expired, another node takes one.
func TestPartitionFromOneServer(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"etcd", "nats"} {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			spec := "partition:holder@600ms+3s/" + server
			c := short(server, true, spec)
			c.TTL, c.Duration = time.Second, 10*c.Tick
			rep, _ := run(t, session(t), c)
			cut := chaosEvent(t, rep.Events, lab.EventChaos, spec+": ")
			require.Contains(t, cut.Detail, "cut from "+server+" only (postgres still reachable)")
			healed := chaosEvent(t, rep.Events, lab.EventHealed, "partition healed")
			require.Equal(t, cut.Node, healed.Node)
			var committed, acquiredCut, acquiredOther bool
			for _, e := range rep.Events {
				if e.T <= cut.T || e.T >= healed.T {
					continue
				}
				switch {
				case e.Kind == lab.EventExecuted && e.Node == cut.Node:
					committed = true
				case e.Kind == lab.EventAcquired && e.Node == cut.Node && e.T > cut.T+0.3:
					// A node reports a grant after its scheduler's catalog check
					// (on PostgreSQL, reachable): one granted just before the
					// cut is reported just after it.
					acquiredCut = true
				case e.Kind == lab.EventAcquired:
					acquiredOther = true
				}
			}
			require.True(t, committed, "node%d, cut from %s only, committed its tick to PostgreSQL during the partition", cut.Node, server)
			require.False(t, acquiredCut, "node%d took a lease from %s while cut from it", cut.Node, server)
			require.True(t, acquiredOther, "another node took the lease during the partition")
		})
	}
}

// requireDown checks a member's healed event says it was down at least
// secs, as the lab measured it from the kill (the kill's own event is
// recorded once the process is gone, which a loaded machine can delay).
func requireDown(t *testing.T, back lab.Event, secs float64) {
	t.Helper()
	m := regexp.MustCompile(` restarted after ([0-9.]+)s down`).FindStringSubmatch(back.Detail)
	require.NotNil(t, m, back.Detail)
	down, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, down, secs, "down for 2 s: %s", back.Detail)
}
