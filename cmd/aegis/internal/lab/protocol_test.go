package lab_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// FuzzNodeArgs: the flags the lab starts a node with read back, in the
// node, as the configuration they came from (ParseNodeArgs inverts Args),
// whatever the strings; Validate accepts only what a node can run.
func FuzzNodeArgs(f *testing.F) {
	f.Add("run-1", 1, "pg-lease", true, int64(time.Second), int64(2*time.Second), 20, int64(5*time.Second), int64(-300*time.Millisecond), "sqlite:/tmp/a b.db", 1)
	f.Add("-x", -1, "--strategy", false, int64(-1), int64(0), 0, int64(1<<63-1), int64(-1<<63), "postgres://u:p@h/db?x=--run", 0)
	f.Add("", 0, "", false, int64(0), int64(0), 0, int64(0), int64(0), "=", -7)
	f.Fuzz(func(t *testing.T, run string, node int, strategy string, fence bool, tick, ttl int64, ticks int, window, skew int64, store string, incarnation int) {
		c := lab.NodeConfig{Run: run, Node: node, Strategy: strategy, Fence: fence, Tick: time.Duration(tick), TTL: time.Duration(ttl),
			Ticks: ticks, Window: time.Duration(window), Skew: time.Duration(skew), Store: store, Incarnation: incarnation}
		got, err := lab.ParseNodeArgs(c.Args(), io.Discard)
		require.NoError(t, err, "%q", c.Args())
		require.Equal(t, c, got, "%q", c.Args())
		if err := got.Validate(); err != nil {
			require.ErrorIs(t, err, aegis.ErrInvalid)
			return
		}
		_, known := lab.LookupStrategy(got.Strategy)
		require.True(t, known && got.Run != "" && got.Store != "" && got.Node >= 1 && got.Ticks >= 1 &&
			got.Tick > 0 && got.TTL > 0 && got.Window > 0, "Validate accepts %+v", got)
	})
}
