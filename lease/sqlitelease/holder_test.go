package sqlitelease_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/rowleasetest"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

func holderOf(t *testing.T, db *sql.DB, key string) string {
	t.Helper()
	var h string
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT holder FROM aegis_lease WHERE key = ?`, key).Scan(&h))
	return h
}

// grant is a row of the grant history.
type grant struct {
	Token  int64
	Holder string
}

func history(t *testing.T, db *sql.DB, key string) []grant {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT token, holder FROM aegis_lease_grant WHERE key = ? ORDER BY token`, key)
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
	db := open(t, filepath.Join(t.TempDir(), "lease.db"))
	web, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "web-1 (o'brien's; DROP TABLE x)"})
	require.NoError(t, err)
	lease, err := web.TryAcquire(ctx, "invoice", time.Minute)
	require.NoError(t, err)
	require.Equal(t, "web-1 (o'brien's; DROP TABLE x)", holderOf(t, db, "invoice"))
	var owner string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT owner FROM aegis_lease WHERE key = 'invoice'`).Scan(&owner))
	require.Equal(t, lease.Owner, owner)

	require.NoError(t, web.Renew(ctx, lease, time.Minute))
	require.Equal(t, "web-1 (o'brien's; DROP TABLE x)", holderOf(t, db, "invoice"), "renew keeps the holder")
	require.NoError(t, web.Release(ctx, lease))
	require.Equal(t, "web-1 (o'brien's; DROP TABLE x)", holderOf(t, db, "invoice"), "release keeps the last holder")

	def, err := sqlitelease.New(db, nil)
	require.NoError(t, err)
	_, err = def.TryAcquire(ctx, "invoice", time.Minute)
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s/%d", host, os.Getpid()), holderOf(t, db, "invoice"), "the next grant overwrites it, by default with host/pid")

	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'aegis_lease_grant'`).Scan(&n))
	require.Zero(t, n, "History 0 creates no history table")
}

// With History N, every grant (TryAcquire, and a queued waiter's) is
// recorded with its holder, and only the key's last N are kept.
func TestHistoryKeepsTheLastN(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "lease.db")
	db := open(t, path)
	a, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "a", History: 3})
	require.NoError(t, err)
	b, err := sqlitelease.New(open(t, path), &sqlitelease.Config{Holder: "b", History: 3})
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
	require.Equal(t, []grant{{3, "a"}, {4, "b"}, {5, "a"}}, history(t, db, "k"))
	require.Equal(t, []grant{{1, "a"}}, history(t, db, "other"), "another key's grants are not trimmed")

	held, err := a.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	done := rowleasetest.QueuedWaiter(t, ctx, b, "k", func() (n int, err error) {
		err = db.QueryRowContext(ctx, `SELECT count(*) FROM aegis_lease_waiter WHERE key = 'k'`).Scan(&n)
		return n, err
	})
	require.NoError(t, a.Release(ctx, held))
	require.NoError(t, testenv.Recv(t, done, 10*time.Second, "the waiter's grant"))
	require.Equal(t, []grant{{5, "a"}, {6, "a"}, {7, "b"}}, history(t, db, "k"))

	var at, lease int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT g.granted_ms, l.granted_ms FROM aegis_lease_grant g JOIN aegis_lease l USING (key) WHERE key = 'k' AND g.token = 7`).Scan(&at, &lease))
	require.Equal(t, lease, at, "the history's time is the grant's")

	c, err := sqlitelease.New(db, &sqlitelease.Config{Holder: "c", History: 1})
	require.NoError(t, err)
	l, err := c.TryAcquire(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Release(ctx, l))
	require.Equal(t, []grant{{8, "c"}}, history(t, db, "k"), "a Locker with a smaller History trims to it")
	require.NoError(t, a.Release(ctx, other))
}

// Bad holder names and history lengths are refused, naming the field.
func TestHolderHistoryRefused(t *testing.T) {
	t.Parallel()
	db := open(t, filepath.Join(t.TempDir(), "lease.db"))
	for _, c := range []struct {
		name  string
		cfg   sqlitelease.Config
		field string
	}{
		{"holder too long", sqlitelease.Config{Holder: strings.Repeat("h", 256)}, "Config.Holder"},
		{"holder with a newline", sqlitelease.Config{Holder: "web-1\nforged log line"}, "Config.Holder"},
		{"holder with a NUL", sqlitelease.Config{Holder: "web\x00"}, "Config.Holder"},
		{"holder not UTF-8", sqlitelease.Config{Holder: "web-\xff"}, "Config.Holder"},
		{"negative history", sqlitelease.Config{History: -1}, "Config.History"},
		{"history too long", sqlitelease.Config{History: 1001}, "Config.History"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sqlitelease.New(db, &c.cfg)
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, c.field)
			require.ErrorIs(t, sqlitelease.Migrate(t.Context(), db, &c.cfg), aegis.ErrInvalid)
		})
	}
	_, err := sqlitelease.New(db, &sqlitelease.Config{Holder: strings.Repeat("é", 127), History: 1000})
	require.NoError(t, err, "255 bytes and 1000 grants are allowed")
}
