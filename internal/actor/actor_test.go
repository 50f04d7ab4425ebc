package actor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/actor"
)

func TestWithFrom(t *testing.T) {
	_, ok := actor.From(context.Background())
	require.False(t, ok, "a bare context carries no writer")
	w := actor.Writer{Node: "node-a", Schedule: "nightly", Fire: time.UnixMilli(1700000000000), Attempt: 2, Token: 7}
	ctx, cancel := context.WithCancel(actor.With(context.Background(), w))
	defer cancel()
	got, ok := actor.From(ctx)
	require.True(t, ok, "a derived context carries its parent's writer")
	require.Equal(t, w, got)
}
