package lab_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/lab"
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
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		if tt.want == "" {
			require.NoError(t, err, "%+v", tt.c)
			continue
		}
		require.ErrorContains(t, err, tt.want)
	}
}
