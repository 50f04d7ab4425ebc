package lab

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's strategy table says what the rows of Strategies say: a
// label changed in one place and not the other fails here.
func TestReadmeStrategyTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../../README.md")
	require.NoError(t, err)
	readme := string(b)
	for _, s := range Strategies {
		g := s.Guarantee(true).String()
		if !s.Fenceable() {
			g = s.Guarantee(false).String() + " (no token to fence with)"
		}
		row := fmt.Sprintf("| `%s` | %s | %s | %s |", s.Name, s.Mode, g, s.NotGuaranteed)
		require.True(t, strings.Contains(readme, row), "README.md's strategy table lacks, or differs from, the row\n%s", row)
	}
}

// A strategy's label is what Excludes holds a run to: fenced, a kept
// ledger excludes lost updates and stale tokens; once per tick excludes
// duplicates, under its condition (clocks that agree within
// LockAtLeastFor).
func TestExcludes(t *testing.T) {
	t.Parallel()
	cfg := func(strategy string, fence bool, chaos ...Chaos) Config {
		c := DefaultConfig()
		c.Strategy, c.Fence, c.Chaos = strategy, fence, chaos
		return c
	}
	require.ElementsMatch(t, []Harm{HarmLostUpdate, HarmStaleAccepted, HarmDuplicate, HarmRetryDuplicate, HarmRefire}, mustLookup(t, "etcd").Excludes(cfg("etcd", true)))
	require.ElementsMatch(t, []Harm{HarmDuplicate, HarmRetryDuplicate, HarmRefire}, mustLookup(t, "etcd").Excludes(cfg("etcd", false)))
	// LockAtLeastFor is half the shortest cadence (1s): 500ms.
	require.ElementsMatch(t, []Harm{HarmLostUpdate, HarmStaleAccepted, HarmDuplicate, HarmRetryDuplicate, HarmRefire},
		mustLookup(t, "etcd").Excludes(cfg("etcd", true, Chaos{Kind: Skew, Target: "node2", Offset: 400 * 1e6})))
	require.ElementsMatch(t, []Harm{HarmLostUpdate, HarmStaleAccepted},
		mustLookup(t, "etcd").Excludes(cfg("etcd", true, Chaos{Kind: Skew, Target: "node2", Offset: 300 * 1e6}, Chaos{Kind: Skew, Target: "node3", Offset: -300 * 1e6})),
		"600ms apart: a tick may run twice")
	require.ElementsMatch(t, []Harm{HarmLostUpdate, HarmStaleAccepted, HarmDuplicate, HarmRefire}, mustLookup(t, "pg-unique").Excludes(cfg("pg-unique", true)))
	require.ElementsMatch(t, []Harm{HarmDuplicate, HarmRefire}, mustLookup(t, "queue").Excludes(cfg("queue", false)))
	require.Empty(t, mustLookup(t, "none").Excludes(cfg("none", true)))
	require.ElementsMatch(t, []Harm{HarmLostUpdate, HarmStaleAccepted}, mustLookup(t, "redis").Excludes(cfg("redis", true)))
	require.Empty(t, mustLookup(t, "pg-nobump").Excludes(cfg("pg-nobump", true)))
}

func mustLookup(t *testing.T, name string) Strategy {
	t.Helper()
	s, ok := LookupStrategy(name)
	require.True(t, ok, name)
	return s
}
