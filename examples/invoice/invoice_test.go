package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

func exports(t *testing.T) *Exports {
	store, err := fence.NewDir(t.TempDir())
	require.NoError(t, err)
	e := &Exports{DB: testenv.Postgres(t), Objects: store}
	require.NoError(t, e.Migrate(t.Context()))
	return e
}

// Two schedulers insert the same period: one row, one unique violation.
func TestSchedulersRace(t *testing.T) {
	t.Parallel()
	ctx, e := t.Context(), exports(t)
	for i := range 20 {
		period := fmt.Sprintf("2026-%02d", i)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for j := range errs {
			wg.Go(func() {
				select {
				case <-start:
				case <-time.After(30 * time.Second):
					errs[j] = errors.New("the start barrier never opened")
					return
				}
				_, errs[j] = e.Claim(ctx, period)
			})
		}
		close(start)
		wg.Wait()
		won, lost := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrClaimed):
				lost++
			default:
				t.Fatal(err)
			}
		}
		require.Equal(t, [2]int{1, 1}, [2]int{won, lost}, period)
	}
	var rows int
	require.NoError(t, e.DB.QueryRow(ctx, "SELECT count(*) FROM invoice_export").Scan(&rows))
	require.Equal(t, 20, rows)
}

// A finish with the wrong token changes nothing.
func TestFinishWithWrongToken(t *testing.T) {
	t.Parallel()
	ctx, e := t.Context(), exports(t)
	token, err := e.Claim(ctx, "2026-10")
	require.NoError(t, err)
	key, err := e.Upload(ctx, "2026-10", token+1, []byte("forged"))
	require.NoError(t, err)
	require.ErrorIs(t, e.Finish(ctx, "2026-10", token+1, key), aegis.ErrStale)
	s, err := e.Get(ctx, "2026-10")
	require.NoError(t, err)
	require.Equal(t, State{Status: "RUNNING", Token: token}, s)
}

// The pause, simulated deterministically: the reaper
// advances the token, then the first worker finishes with the old one.
func TestReaperThenStaleFinish(t *testing.T) {
	t.Parallel()
	ctx, e := t.Context(), exports(t)
	first, err := e.Claim(ctx, "2026-10")
	require.NoError(t, err)
	key1, err := e.Upload(ctx, "2026-10", first, Render("2026-10", first))
	require.NoError(t, err)

	_, ok, err := e.Reap(ctx, "2026-10", time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "a run younger than the threshold is not reclaimed")
	second, ok, err := e.Reap(ctx, "2026-10", 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, second, first)

	key2, err := e.Upload(ctx, "2026-10", second, Render("2026-10", second))
	require.NoError(t, err)
	require.ErrorIs(t, e.Finish(ctx, "2026-10", first, key1), aegis.ErrStale, "the old worker's finish")
	s, err := e.Get(ctx, "2026-10")
	require.NoError(t, err)
	require.Equal(t, "RUNNING", s.Status, "the old worker's finish must not set FINISHED")
	require.NoError(t, e.Finish(ctx, "2026-10", second, key2), "the new worker's finish")
	s, err = e.Get(ctx, "2026-10")
	require.NoError(t, err)
	require.Equal(t, State{Status: "FINISHED", Token: second, ObjectKey: key2}, s)

	r, err := e.Objects.Open(ctx, s.ObjectKey)
	require.NoError(t, err)
	defer r.Close()
	b, _ := io.ReadAll(r)
	require.Equal(t, Render("2026-10", second), b, "the canonical object is the new token's")
	keys, err := e.Objects.List(ctx, "exports/2026-10")
	require.NoError(t, err)
	require.Equal(t, []string{key2}, keys, "the stale worker deleted its upload")

	_, ok, err = e.Reap(ctx, "2026-10", 0)
	require.NoError(t, err)
	require.False(t, ok, "the reaper never reclaims a finished export")
}

// A worker that crashed after its upload leaves an object no row
// references; the sweeper deletes it, and never the canonical one.
func TestSweepCrashedUpload(t *testing.T) {
	t.Parallel()
	ctx, e := t.Context(), exports(t)
	first, err := e.Claim(ctx, "2026-10")
	require.NoError(t, err)
	orphan, err := e.Upload(ctx, "2026-10", first, []byte("crashed"))
	require.NoError(t, err)
	second, _, err := e.Reap(ctx, "2026-10", 0)
	require.NoError(t, err)
	key2, err := e.Upload(ctx, "2026-10", second, Render("2026-10", second))
	require.NoError(t, err)
	deleted, err := e.Sweep(ctx, "2026-10")
	require.NoError(t, err)
	require.Equal(t, []string{orphan}, deleted, "before the finish: only the stale upload goes")
	require.NoError(t, e.Finish(ctx, "2026-10", second, key2))
	deleted, err = e.Sweep(ctx, "2026-10")
	require.NoError(t, err)
	require.Empty(t, deleted)
	keys, err := e.Objects.List(ctx, "exports/2026-10")
	require.NoError(t, err)
	require.Equal(t, []string{key2}, keys)
}

func TestStory(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, story(t.Context(), exports(t), "2026-10", 50*time.Millisecond, newTimeline(&out)))
	for _, want := range []string{
		"won, fencing token 1",
		"unique violation, another scheduler owns it",
		"reclaimed 2026-10: fencing token 1 -> 2",
		"finish WHERE fencing_token = 2: 1 row, FINISHED",
		"finish WHERE fencing_token = 1: 0 rows",
		"status FINISHED, token 2",
	} {
		require.Contains(t, out.String(), want)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, run(t.Context(), []string{"-reap-after", "-1s"}, io.Discard), "must be positive")
	require.Error(t, run(t.Context(), []string{"-nope"}, io.Discard))
}
