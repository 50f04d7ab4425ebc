package pglease_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/rowleasetest"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
)

// holderOf reads the holder column of key's row.
func holderOf(t *testing.T, p *pgxpool.Pool, key string) string {
	t.Helper()
	var h string
	require.NoError(t, p.QueryRow(t.Context(), `SELECT holder FROM aegis_lease WHERE key = $1`, key).Scan(&h))
	return h
}

// grant is a row of the grant history.
type grant struct {
	Token  int64
	Holder string
}

func history(t *testing.T, p *pgxpool.Pool, key string) []grant {
	t.Helper()
	rows, err := p.Query(t.Context(), `SELECT token, holder FROM aegis_lease_grant WHERE key = $1 ORDER BY token`, key)
	require.NoError(t, err)
	defer rows.Close()
	var out []grant
	for rows.Next() {
		var g grant
		require.NoError(t, rows.Scan(&g.Token, &g.Holder))
		out = append(out, g)
	}
	require.NoError(t, rows.Err())
	return out
}

// Every grant writes the holder name beside the owner, never the owner;
// renew and release keep it; the default is host/pid.
func TestHolder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := testenv.Postgres(t)
	web, err := pglease.New(p, &pglease.Config{Holder: "web-1 (o'brien's; DROP TABLE x)"})
	require.NoError(t, err)
	lease, err := web.TryAcquire(ctx, "invoice", time.Minute)
	require.NoError(t, err)
	require.Equal(t, "web-1 (o'brien's; DROP TABLE x)", holderOf(t, p, "invoice"))
	var owner string
	require.NoError(t, p.QueryRow(ctx, `SELECT owner FROM aegis_lease WHERE key = 'invoice'`).Scan(&owner))
	require.Equal(t, lease.Owner, owner)
	require.NotContains(t, holderOf(t, p, "invoice"), owner)

	require.NoError(t, web.Renew(ctx, lease, time.Minute))
	require.Equal(t, "web-1 (o'brien's; DROP TABLE x)", holderOf(t, p, "invoice"), "renew keeps the holder")
	require.NoError(t, web.Release(ctx, lease))
	require.Equal(t, "web-1 (o'brien's; DROP TABLE x)", holderOf(t, p, "invoice"), "release keeps the last holder")

	def, err := pglease.New(p, nil)
	require.NoError(t, err)
	next, err := def.TryAcquire(ctx, "invoice", time.Minute)
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s/%d", host, os.Getpid()), holderOf(t, p, "invoice"), "the next grant overwrites it, by default with host/pid")
	require.Greater(t, next.Token, lease.Token)

	var n int
	require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'aegis_lease_grant'`).Scan(&n))
	require.Zero(t, n, "History 0 creates no history table")
}

// With History N, every grant (TryAcquire, and a queued waiter's) is
// recorded with its holder, and only the key's last N are kept.
func TestHistoryKeepsTheLastN(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p := testenv.Postgres(t)
	a, err := pglease.New(p, &pglease.Config{Holder: "a", History: 3})
	require.NoError(t, err)
	b, err := pglease.New(p, &pglease.Config{Holder: "b", History: 3})
	require.NoError(t, err)

	other, err := a.TryAcquire(ctx, "other", time.Minute)
	require.NoError(t, err)
	for i := range 5 {
		l := a
		if i%2 == 1 {
			l = b
		}
		lease, err := l.TryAcquire(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.Equal(t, aegis.Token(i+1), lease.Token)
		require.NoError(t, l.Release(ctx, lease))
	}
	require.Equal(t, []grant{{3, "a"}, {4, "b"}, {5, "a"}}, history(t, p, "k"))
	require.Equal(t, []grant{{1, "a"}}, history(t, p, "other"), "another key's grants are not trimmed")

	// A waiter's grant (the queued statement) is recorded too.
	held, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	done := rowleasetest.QueuedWaiter(t, ctx, b, "k", func() (int, error) {
		var n int
		err := p.QueryRow(ctx, `SELECT count(*) FROM aegis_lease_waiter WHERE key = 'k'`).Scan(&n)
		return n, err
	})
	require.NoError(t, a.Release(ctx, held))
	require.NoError(t, testenv.Recv(t, done, 10*time.Second, "the waiter's grant"))
	require.Equal(t, []grant{{5, "a"}, {6, "a"}, {7, "b"}}, history(t, p, "k"))

	var at, now time.Time
	require.NoError(t, p.QueryRow(ctx, `SELECT granted_at, now() FROM aegis_lease_grant WHERE key = 'k' AND token = 7`).Scan(&at, &now))
	require.WithinDuration(t, now, at, 10*time.Second, "granted at, in database time")

	// A Locker with a smaller N deletes the one grant that falls off its
	// own N, and the rest at the sweep of every 64th token.
	c, err := pglease.New(p, &pglease.Config{Holder: "c", History: 1})
	require.NoError(t, err)
	lease, err := c.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Release(ctx, lease))
	require.Equal(t, []grant{{5, "a"}, {6, "a"}, {8, "c"}}, history(t, p, "k"))
	for lease.Token < 63 {
		lease, err = c.TryAcquire(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, c.Release(ctx, lease))
	}
	require.Equal(t, []grant{{5, "a"}, {6, "a"}, {63, "c"}}, history(t, p, "k"))
	lease, err = c.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Release(ctx, lease))
	require.Equal(t, []grant{{64, "c"}}, history(t, p, "k"), "token 64 sweeps")
	require.NoError(t, a.Release(ctx, other))
}

// Bad holder names and history lengths are refused by New and Migrate,
// naming the field.
func TestConfigRefused(t *testing.T) {
	t.Parallel()
	p := testenv.Postgres(t)
	for _, c := range []struct {
		name  string
		cfg   pglease.Config
		field string
	}{
		{"holder too long", pglease.Config{Holder: strings.Repeat("h", 256)}, "Config.Holder"},
		{"holder with a newline", pglease.Config{Holder: "web-1\nforged log line"}, "Config.Holder"},
		{"holder with an escape", pglease.Config{Holder: "web-1\x1b[31m"}, "Config.Holder"},
		{"holder not UTF-8", pglease.Config{Holder: "web-\xff"}, "Config.Holder"},
		{"negative history", pglease.Config{History: -1}, "Config.History"},
		{"history too long", pglease.Config{History: 1001}, "Config.History"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := pglease.New(p, &c.cfg)
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, c.field)
			err = pglease.Migrate(t.Context(), p, &c.cfg)
			require.ErrorIs(t, err, aegis.ErrInvalid)
		})
	}
	_, err := pglease.New(p, &pglease.Config{Holder: strings.Repeat("é", 127), History: 1000})
	require.NoError(t, err, "255 bytes and 1000 grants are allowed")
}
