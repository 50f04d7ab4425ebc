package lab_test

import (
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// TestConfigValidate: a bad run configuration is an error naming the
// flag.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := func(strategy string, edit func(*lab.Config)) lab.Config {
		c := lab.DefaultConfig()
		c.Strategy = strategy
		if edit != nil {
			edit(&c)
		}
		return c
	}
	tests := []struct {
		c    lab.Config
		want string // "" for valid
	}{
		{cfg("queue", nil), ""},
		{cfg("queue", func(c *lab.Config) { c.TTL = 100 * time.Millisecond }), ""},
		{cfg("queue", func(c *lab.Config) { c.TTL = 50 * time.Millisecond }), "--ttl 50ms: the queue strategy's job lease is at least 100ms"},
		{cfg("pg-lease", func(c *lab.Config) { c.TTL = 50 * time.Millisecond }), ""},
		{cfg("", nil), "--strategy is required"},
		{cfg("nope", nil), `--strategy "nope": unknown`},
		{cfg("none", func(c *lab.Config) { c.Nodes = 0 }), "--nodes 0"},
		{cfg("none", func(c *lab.Config) { c.TTL = 0 }), "--ttl 0s: must be positive"},
		{cfg("none", func(c *lab.Config) { c.Work = -time.Second }), "--work -1s"},
		{cfg("none", func(c *lab.Config) { c.Tick = 10500 * time.Microsecond }), "--tick 10.5ms: want a whole number of milliseconds"},
		{cfg("none", func(c *lab.Config) { c.TTL = 2500500 * time.Microsecond }), "--ttl 2.5005s: want a whole number of milliseconds"},
		{cfg("none", func(c *lab.Config) {
			c.Chaos = []lab.Chaos{{Kind: lab.Pause, Target: "node7", At: time.Second, For: time.Second}}
		}), "--chaos pause:node7@1s+1s: node7 does not exist"},
		{cfg("pg-lease", func(c *lab.Config) {
			c.Chaos = []lab.Chaos{{Kind: lab.Edit, Target: "nightly", At: time.Second, Spec: "2s/1s"}}
		}), ""},
		{cfg("pg-lease", func(c *lab.Config) {
			c.Chaos = []lab.Chaos{{Kind: lab.Edit, Target: "invoice-export", At: time.Second, Spec: "2s/100ms"}}
		}), `job "invoice-export" is in the run's catalog already`},
		{cfg("pg-lease", func(c *lab.Config) {
			c.Chaos = []lab.Chaos{{Kind: lab.Edit, Target: "nightly", At: time.Second, Spec: "1500ms/100ms"}}
		}), "nightly: EVERY 1.5s is not a whole number of ticks"},
		{cfg("pg-lease", func(c *lab.Config) {
			c.Chaos = []lab.Chaos{{Kind: lab.Edit, Target: "nightly", At: time.Second, Spec: "2s"}}
		}), `job "nightly" is not in the run's catalog`},
		{cfg("pg-unique", func(c *lab.Config) { c.Standby = 1 }), ""},
		{cfg("queue", func(c *lab.Config) { c.Standby = 1 }), ""},
		{cfg("pg-lease", func(c *lab.Config) { c.Standby = 1 }), "--standby: pg-lease is in lease mode"},
		{cfg("pg-unique", func(c *lab.Config) { c.Standby = 3 }), "--standby 3: want 0 to 2"},
		{cfg("pg-unique", func(c *lab.Config) {
			c.Standby, c.Chaos = 1, []lab.Chaos{{Kind: lab.Promote, Target: lab.Standby, At: time.Second}}
		}), ""},
		{cfg("queue", func(c *lab.Config) {
			c.Standby, c.Chaos = 1, []lab.Chaos{{Kind: lab.Promote, Target: lab.Standby, At: time.Second}}
		}), ""},
		{cfg("pg-unique", func(c *lab.Config) {
			c.Chaos = []lab.Chaos{{Kind: lab.Promote, Target: lab.Standby, At: time.Second}}
		}), "--chaos promote:standby@1s: the run has no standby to promote: give it a second region (--standby N)"},
		{cfg("pg-unique", func(c *lab.Config) {
			c.Standby, c.Chaos = 1, []lab.Chaos{{Kind: lab.Promote, Target: lab.Standby, At: time.Second}, {Kind: lab.Promote, Target: lab.Standby, At: 2 * time.Second}}
		}), "--chaos promote:standby@2s: a run promotes its standby once (it also has promote:standby@1s)"},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		if tt.want == "" {
			require.NoError(t, err, "%+v", tt.c)
			continue
		}
		require.ErrorContains(t, err, tt.want)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.want)
	}
}

// CheckChaos on a zero Config (no tick) says what is wrong; it divided
// by the zero tick.
func TestCheckChaosZeroConfig(t *testing.T) {
	t.Parallel()
	s, ok := lab.LookupStrategy("none")
	require.True(t, ok)
	ch, err := lab.ParseChaos("edit:added@0s=1s/0s")
	require.NoError(t, err)
	err = lab.Config{}.CheckChaos(s, ch)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "--tick 0s: must be positive")
}

// Excludes is what the campaign holds a run to: the strategy's label,
// fenced or not, and, for a lease strategy, whether the run's clocks differ
// by less than its jobs' LockAtLeastFor (half the cadence: 500 ms for the
// default catalog's one-second job).
func TestStrategyExcludes(t *testing.T) {
	t.Parallel()
	all := []lab.Harm{lab.HarmLostUpdate, lab.HarmStaleAccepted, lab.HarmDuplicate, lab.HarmRetryDuplicate, lab.HarmRefire}
	run := func(strategy string, fence bool, skews ...string) lab.Config {
		c := lab.DefaultConfig()
		c.Strategy, c.Fence = strategy, fence
		for _, spec := range skews {
			ch, err := lab.ParseChaos(spec)
			require.NoError(t, err)
			c.Chaos = append(c.Chaos, ch)
		}
		require.NoError(t, c.Validate())
		return c
	}
	for _, tc := range []struct {
		c    lab.Config
		want []lab.Harm
	}{
		{run("none", true), nil},
		{run("pg-advisory", true), nil},
		{run("pg-lease", true), all},
		{run("pg-lease", false), []lab.Harm{lab.HarmDuplicate, lab.HarmRetryDuplicate, lab.HarmRefire}},
		{run("pg-lease", true, "skew:node2=+499ms"), all},
		{run("pg-lease", true, "skew:node2=+300ms", "skew:node3=-200ms"), []lab.Harm{lab.HarmLostUpdate, lab.HarmStaleAccepted}},
		{run("pg-lease", false, "skew:node1=+500ms"), nil},
		{run("etcd", true, "skew:node1=-1s"), []lab.Harm{lab.HarmLostUpdate, lab.HarmStaleAccepted}},
		{run("pg-unique", true), []lab.Harm{lab.HarmLostUpdate, lab.HarmStaleAccepted, lab.HarmDuplicate, lab.HarmRefire}},
		{run("pg-unique", false), []lab.Harm{lab.HarmDuplicate, lab.HarmRefire}},
		{run("queue", true, "skew:node1=+5s"), []lab.Harm{lab.HarmLostUpdate, lab.HarmStaleAccepted, lab.HarmDuplicate, lab.HarmRefire}},
		{run("optimistic", true), []lab.Harm{lab.HarmLostUpdate, lab.HarmStaleAccepted}},
		{run("optimistic", false), nil},
		{run("redis", true), []lab.Harm{lab.HarmLostUpdate, lab.HarmStaleAccepted}},
		{run("redlock", false), nil},
	} {
		s, ok := lab.LookupStrategy(tc.c.Strategy)
		require.True(t, ok)
		require.ElementsMatch(t, tc.want, s.Excludes(tc.c), "%s", tc.c)
		g := s.Guarantee(tc.c.Fence)
		require.Equal(t, g.Ledger, slices.Contains(s.Excludes(tc.c), lab.HarmLostUpdate), "%s: Ledger is what excludes a lost update", tc.c)
	}
}

// Inspect's bad input is refused before a query runs.
func TestInspectRefusesBadInput(t *testing.T) {
	t.Parallel()
	_, err := runner.Inspect(t.Context(), nil, nil, runner.InspectOptions{})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "db is nil")
	db, err := sql.Open("pgx", testenv.PostgresURL(t))
	require.NoError(t, err)
	defer db.Close()
	for _, tc := range []struct {
		names []string
		o     runner.InspectOptions
		want  string
	}{
		{nil, runner.InspectOptions{OlderThan: -time.Second}, "OlderThan -1s is negative"},
		{nil, runner.InspectOptions{Limit: -1}, "Limit -1 is negative"},
		{[]string{"stuck", "who"}, runner.InspectOptions{}, `unknown query "who"`},
	} {
		_, err := runner.Inspect(t.Context(), db, tc.names, tc.o)
		require.ErrorIs(t, err, aegis.ErrInvalid, tc.want)
		require.ErrorContains(t, err, tc.want)
	}
}
