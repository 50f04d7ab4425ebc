package measure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRounds(t *testing.T) {
	var order []string
	op := func(name string) func(context.Context, int) error {
		return func(context.Context, int) error {
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
			return nil
		}
	}
	tallies, err := Rounds(t.Context(), []Subject{{"a", op("a")}, {"b", op("b")}, {"c", op("c")}}, 1, 2, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "b", "c", "a"}, order, "the second round starts with the second subject")
	for i := range tallies {
		tl := &tallies[i]
		require.Positive(t, tl.Ops, "subject %d", i)
		require.Equal(t, tl.Ops, tl.Rec.Count(), "subject %d: a latency per operation", i)
		require.Positive(t, tl.Elapsed, "subject %d", i)
		require.Positive(t, tl.OpsPerSec(), "subject %d", i)
	}

	boom := errors.New("boom")
	_, err = Rounds(t.Context(), []Subject{{"a", op("a")}, {"broken", func(context.Context, int) error { return boom }}}, 1, 1, time.Millisecond)
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "broken, 1 goroutines")
}

func TestParseCounts(t *testing.T) {
	got, err := ParseCounts("1, 16,256")
	require.NoError(t, err)
	require.Equal(t, []int{1, 16, 256}, got)
	got, err = ParseCounts("")
	require.NoError(t, err)
	require.Empty(t, got)
	for _, bad := range []string{"0", "x", "1,-2"} {
		_, err := ParseCounts(bad)
		require.ErrorContains(t, err, "is not a positive count", bad)
	}
}
