package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/tcpproxy"
	"github.com/aegislab/aegis/schedule"
)

// Bad input gets an error that names the field, wraps ErrInvalid, and
// writes nothing: the namespace stays unknown.
func TestCatalogBadInput(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db string, r *replica) {
		ctx := context.Background()
		cat := openCatalog(t, r, nil)
		ok := schedule.Entry{Name: "n", Cron: "0 * * * * *", Handler: "h"}
		with := func(f func(*schedule.Entry)) schedule.Entry { e := ok; f(&e); return e }
		for _, c := range []struct {
			name  string
			entry schedule.Entry
			want  string
		}{
			{"unparseable cron", with(func(e *schedule.Entry) { e.Cron = "0 61 * * * *" }), "Entry.Cron"},
			{"cron with too few fields", with(func(e *schedule.Entry) { e.Cron = "* *" }), "Entry.Cron"},
			{"zone in the cron spec", with(func(e *schedule.Entry) { e.Cron = "TZ=UTC 0 * * * * *" }), "Entry.TZ"},
			{"unknown time zone", with(func(e *schedule.Entry) { e.TZ = "Mars/Olympus" }), `Entry.TZ "Mars/Olympus"`},
			{"Local is no zone", with(func(e *schedule.Entry) { e.TZ = "Local" }), "Entry.TZ"},
			{"negative interval", with(func(e *schedule.Entry) { e.Cron, e.Every = "", -time.Second }), "Entry.Every"},
			{"sub-millisecond interval", with(func(e *schedule.Entry) { e.Cron, e.Every = "", 500*time.Microsecond }), "Entry.Every"},
			{"both cron and interval", with(func(e *schedule.Entry) { e.Every = time.Second }), "not both"},
			{"neither cron nor interval", with(func(e *schedule.Entry) { e.Cron = "" }), "set one of Entry.Cron and Entry.Every"},
			{"zone for an interval", with(func(e *schedule.Entry) { e.Cron, e.Every, e.TZ = "", time.Second, "UTC" }), "Entry.TZ"},
			{"empty name", with(func(e *schedule.Entry) { e.Name = "" }), "Entry.Name"},
			{"over-long name", with(func(e *schedule.Entry) { e.Name = strings.Repeat("n", schedule.MaxNameLen+1) }), "Entry.Name"},
			{"NUL in name", with(func(e *schedule.Entry) { e.Name = "a\x00b" }), "Entry.Name"},
			{"empty handler", with(func(e *schedule.Entry) { e.Handler = "" }), "Entry.Handler"},
			{"args not JSON", with(func(e *schedule.Entry) { e.Args = json.RawMessage(`{"a":`) }), "Entry.Args"},
			{"args over 64 KiB", with(func(e *schedule.Entry) {
				e.Args = json.RawMessage(`"` + strings.Repeat("x", schedule.MaxArgsLen) + `"`)
			}), "Entry.Args"},
			{"args not UTF-8", with(func(e *schedule.Entry) { e.Args = json.RawMessage("\"\xff\"") }), "Entry.Args"},
			{"negative deadline", with(func(e *schedule.Entry) { e.StartingDeadline = -time.Second }), "Entry.StartingDeadline"},
			{"deadline under 1ms (stored as 0, the default)", with(func(e *schedule.Entry) { e.StartingDeadline = 500 * time.Microsecond }), "Entry.StartingDeadline 500µs is not a whole number of milliseconds"},
			{"lease of a fraction of a millisecond", with(func(e *schedule.Entry) { e.LockAtMostFor = 10500 * time.Microsecond }), "Entry.LockAtMostFor"},
			{"at least beyond at most", with(func(e *schedule.Entry) { e.LockAtMostFor, e.LockAtLeastFor = time.Second, 2*time.Second }), "Entry.LockAtLeastFor"},
			{"attempts out of range", with(func(e *schedule.Entry) { e.MaxAttempts = 5000 }), "Entry.MaxAttempts"},
			{"unknown misfire policy", with(func(e *schedule.Entry) { e.Misfire = 9 }), "Entry.Misfire"},
		} {
			_, err := cat.Put(ctx, c.entry)
			require.ErrorIs(t, err, aegis.ErrInvalid, c.name)
			require.ErrorContains(t, err, c.want, c.name)
			err = c.entry.Validate()
			require.ErrorIs(t, err, aegis.ErrInvalid, "Validate refuses what Put refuses: %s", c.name)
			require.ErrorContains(t, err, c.want, c.name)
		}
		require.NoError(t, ok.Validate())
		list, err := cat.List(ctx)
		require.NoError(t, err)
		require.Empty(t, list, "nothing written")
		err = cat.Delete(ctx, "n")
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorIs(t, err, schedule.ErrNotFound)
		require.ErrorContains(t, err, `namespace "default" is unknown`, "nothing written, not even the namespace")

		_, err = cat.Put(ctx, ok)
		require.NoError(t, err)
		err = cat.Delete(ctx, "other")
		require.ErrorIs(t, err, schedule.ErrNotFound)
		require.False(t, errors.Is(err, aegis.ErrInvalid), "a known namespace without the schedule: not found, not invalid")
		_, err = cat.Pause(ctx, "other")
		require.ErrorIs(t, err, schedule.ErrNotFound)
		_, err = cat.Get(ctx, "other")
		require.ErrorIs(t, err, schedule.ErrNotFound)

		for _, cfg := range []*schedule.CatalogConfig{{Namespace: "Bad Name"}, {Namespace: "-x"}, {EditDelay: -time.Second}, {Table: "a b"}} {
			_, err := schedule.NewCatalog(ctx, r.db, cfg)
			require.ErrorIs(t, err, aegis.ErrInvalid, "%+v", cfg)
			require.ErrorIs(t, cfg.Validate(), aegis.ErrInvalid, "Validate refuses what NewCatalog refuses: %+v", cfg)
		}
		require.NoError(t, schedule.CatalogConfig{}.Validate())
		_, err = schedule.NewCatalog(ctx, nil, nil)
		require.ErrorIs(t, err, aegis.ErrInvalid)

		// The scheduler's side: handlers and namespaces.
		other, err := schedule.NewCatalog(ctx, r.db, &schedule.CatalogConfig{Namespace: "billing"})
		require.NoError(t, err)
		_, err = schedule.New(&schedule.Config{Store: r.store, Catalog: other})
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, `"billing"`, "the Store's namespace is the default one")
		noCat, err := schedule.New(&schedule.Config{Store: r.store})
		require.NoError(t, err)
		require.ErrorIs(t, noCat.Handle("h", func(context.Context, json.RawMessage) error { return nil }), aegis.ErrInvalid)
		s, err := schedule.New(&schedule.Config{Store: r.store, Catalog: cat})
		require.NoError(t, err)
		require.ErrorIs(t, s.Handle("", func(context.Context, json.RawMessage) error { return nil }), aegis.ErrInvalid)
		require.ErrorIs(t, s.Handle("h", nil), aegis.ErrInvalid)
		require.NoError(t, s.Handle("h", func(context.Context, json.RawMessage) error { return nil }))
		require.ErrorIs(t, s.Handle("h", func(context.Context, json.RawMessage) error { return nil }), aegis.ErrInvalid, "twice")

		// A catalog on another database than the run table.
		elsewhere := sqliteReplica(t, sqlitePath(t))
		far := openCatalog(t, elsewhere, &schedule.CatalogConfig{Table: "elsewhere"})
		far2, err := schedule.New(&schedule.Config{Store: r.store, Catalog: far})
		if db == "postgres" {
			require.ErrorIs(t, err, aegis.ErrInvalid, "PostgreSQL runs, SQLite catalog")
		} else {
			require.NoError(t, err)
			err = far2.Start(ctx)
			require.ErrorIs(t, err, aegis.ErrInvalid, "two SQLite files")
			require.ErrorContains(t, err, "Config.Catalog must be on the Store's database")
		}
	})
}

// A row this version cannot read (written by hand, or by another version)
// does not hide the others: List returns them, and a *BadRowsError names
// the row and what is wrong with it.
func TestCatalogListBadRow(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db string, r *replica) {
		ctx := context.Background()
		cat := openCatalog(t, r, nil)
		for _, n := range []string{"a", "b", "c", "d"} {
			_, err := cat.Put(ctx, schedule.Entry{Name: n, Every: time.Minute, Handler: "h"})
			require.NoError(t, err)
		}
		_, err := r.db.ExecContext(ctx, `UPDATE aegis_schedule SET spec = '@every banana' WHERE name = 'b'`)
		require.NoError(t, err)
		_, err = r.db.ExecContext(ctx, `UPDATE aegis_schedule SET misfire = 'sometimes' WHERE name = 'd'`)
		require.NoError(t, err)

		es, err := cat.List(ctx)
		var bad *schedule.BadRowsError
		require.ErrorAs(t, err, &bad)
		require.Equal(t, []string{"a", "c"}, names(es), "the readable rows")
		require.Equal(t, "default", bad.Namespace)
		require.Len(t, bad.Rows, 2)
		require.Equal(t, "b", bad.Rows[0].Name)
		require.ErrorContains(t, bad.Rows[0].Err, `spec "@every banana"`)
		require.Equal(t, "d", bad.Rows[1].Name)
		require.ErrorContains(t, bad.Rows[1].Err, `"sometimes"`)
		require.ErrorContains(t, err, `2 catalog row(s) of namespace "default" cannot be read: schedule: catalog row "b": spec "@every banana"`)
		require.False(t, errors.Is(err, aegis.ErrInvalid), "a bad row is not the caller's mistake")
	})
}

func names(es []schedule.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// Start on a database that is down, or whose pool was closed, returns the
// failure as such, naming what failed: an outage is not a configuration
// mistake (aegis.ErrInvalid), which only a catalog table missing from the
// Store's database is.
func TestStartStoreDown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	startErr := func(t *testing.T, r *replica) (*schedule.Scheduler, func() error) {
		t.Helper()
		s, err := schedule.New(&schedule.Config{Store: r.store, Catalog: openCatalog(t, r, nil)})
		require.NoError(t, err)
		t.Cleanup(func() { stop(t, s) })
		return s, func() error { return s.Start(ctx) }
	}
	requireOutage := func(t *testing.T, err error, cause string) {
		t.Helper()
		require.Error(t, err)
		require.False(t, errors.Is(err, aegis.ErrInvalid), "an outage is not ErrInvalid: %v", err)
		require.NotContains(t, err.Error(), "must be on the Store's database")
		require.ErrorContains(t, err, `schedule: Start: read the catalog table "aegis_schedule" on the Store's database: `+cause)
	}
	t.Run("postgres closed", func(t *testing.T) {
		t.Parallel()
		r := pgReplica(t, pgURL(t))
		_, start := startErr(t, r)
		r.db.Close()
		r.pool.Close()
		requireOutage(t, start(), "sql: database is closed")
	})
	t.Run("sqlite closed", func(t *testing.T) {
		t.Parallel()
		r := sqliteReplica(t, sqlitePath(t))
		_, start := startErr(t, r)
		r.db.Close()
		requireOutage(t, start(), "sql: database is closed")
	})
	t.Run("postgres down", func(t *testing.T) {
		t.Parallel()
		u, err := url.Parse(pgURL(t))
		require.NoError(t, err)
		proxy, err := tcpproxy.New(u.Host)
		require.NoError(t, err)
		t.Cleanup(func() { _ = proxy.Close() })
		u.Host = proxy.Addr()
		r := pgReplica(t, u.String())
		_, start := startErr(t, r)
		proxy.Cut() // the server is gone: connections drop, new ones are refused
		requireOutage(t, start(), "")
	})
	t.Run("sqlite catalog elsewhere", func(t *testing.T) {
		t.Parallel()
		r := sqliteReplica(t, sqlitePath(t))
		far := openCatalog(t, sqliteReplica(t, sqlitePath(t)), nil)
		s, err := schedule.New(&schedule.Config{Store: r.store, Catalog: far})
		require.NoError(t, err)
		t.Cleanup(func() { stop(t, s) })
		err = s.Start(ctx)
		require.ErrorIs(t, err, aegis.ErrInvalid, "a missing table is the configuration's")
		require.ErrorContains(t, err, "Config.Catalog must be on the Store's database")
	})
}
