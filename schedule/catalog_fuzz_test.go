package schedule_test

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/schedule"
)

// FuzzCatalogPut puts a fuzzed entry into a real catalog on SQLite and on
// PostgreSQL: both refuse it at Put with an error that wraps
// aegis.ErrInvalid, or both store it, and Get reads back what was put
// (the defaults filled in, the args as JSON), with a spec that fires.
// Nothing else: no server error, no row that does not read back.
func FuzzCatalogPut(f *testing.F) {
	type seed struct {
		name, cron, tz        string
		every                 time.Duration
		handler, args, ns     string
		misfire, overlap      int8
		deadline, most, least time.Duration
		attempts              int16
	}
	for _, s := range []seed{
		{name: "nightly", cron: "0 30 2 * * *", tz: "Europe/Berlin", handler: "export", args: `{"period":"day"}`},
		{name: "tick", every: time.Second, handler: "h", ns: "billing", misfire: 2, overlap: 1, deadline: time.Second, most: time.Minute, least: time.Second, attempts: 5},
		{name: "é/€ x", cron: "@daily", handler: "h", args: `[1, 2.50, "x", null, true]`},
		{name: "n", cron: " */5 * * * * ", handler: "h", args: ` {"a": {"b": [1e3]}} `},
		{name: "n", cron: "0 * * * * *", tz: "Local", handler: "h"},
		{name: "n", every: 1500 * time.Microsecond, handler: "h"},
		{name: "n", every: time.Second, handler: "h", args: `"\u0000"`},
		{name: "n", every: time.Second, handler: "h", args: `"\ud800"`},
		{name: "n", every: time.Second, handler: "h", args: `1e1000000`},
		{name: "n", every: time.Second, handler: "h", ns: "Upper"},
		{name: "n\x00", every: time.Second, handler: "h\xff"},
	} {
		f.Add(s.name, s.cron, s.tz, int64(s.every), s.handler, s.args, s.ns, s.misfire, s.overlap, int64(s.deadline), int64(s.most), int64(s.least), s.attempts)
	}
	ctx := context.Background()
	stores := map[string]*replica{"sqlite": sqliteReplica(f, sqlitePath(f)), "postgres": pgReplica(f, pgURL(f))}
	catalogs := map[[2]string]*schedule.Catalog{} // by store and namespace
	catalog := func(t *testing.T, store, ns string) (*schedule.Catalog, error) {
		if c := catalogs[[2]string{store, ns}]; c != nil {
			return c, nil
		}
		c, err := schedule.NewCatalog(ctx, stores[store].db, &schedule.CatalogConfig{Namespace: ns})
		if err == nil {
			catalogs[[2]string{store, ns}] = c
		}
		return c, err
	}
	f.Fuzz(func(t *testing.T, name, cron, tz string, every int64, handler, args, ns string,
		misfire, overlap int8, deadline, most, least int64, attempts int16) {
		e := schedule.Entry{
			Name: name, Cron: cron, TZ: tz, Every: time.Duration(every), Handler: handler, Args: json.RawMessage(args),
			Misfire: schedule.Misfire(misfire), Overlap: schedule.Overlap(overlap), StartingDeadline: time.Duration(deadline),
			LockAtMostFor: time.Duration(most), LockAtLeastFor: time.Duration(least), MaxAttempts: int(attempts),
		}
		var refused []string
		for _, store := range []string{"sqlite", "postgres"} {
			cat, err := catalog(t, store, ns)
			if err != nil {
				require.ErrorIs(t, err, aegis.ErrInvalid, "%s: NewCatalog(namespace %q)", store, ns)
				refused = append(refused, store)
				continue
			}
			put, err := cat.Put(ctx, e)
			if err != nil {
				require.ErrorIs(t, err, aegis.ErrInvalid, "%s: Put(%+v)", store, e)
				refused = append(refused, store)
				continue
			}
			got, err := cat.Get(ctx, name)
			require.NoError(t, err, "%s: Get(%q) after its Put", store, name)
			require.Equal(t, put, got, "%s: Put returns the row Get reads", store)

			want := e
			want.Cron = strings.TrimSpace(e.Cron)
			if want.Cron != "" && want.TZ == "" {
				want.TZ = "UTC"
			}
			if len(e.Args) == 0 {
				want.Args = json.RawMessage("{}")
			}
			same, err := testenv.SameJSON(want.Args, got.Args)
			require.NoError(t, err, "%s: the args", store)
			require.True(t, same, "%s: the args %q read back as %q", store, want.Args, got.Args)
			want.Args = got.Args
			want.LockAtMostFor = cmp.Or(want.LockAtMostFor, 30*time.Second)
			want.MaxAttempts = cmp.Or(want.MaxAttempts, 3)
			want.CatchUpMax = cmp.Or(want.CatchUpMax, 1)
			want.Namespace = cmp.Or(ns, schedule.DefaultNamespace)
			// What the catalog sets.
			want.Version, want.EffectiveAt, want.Created, want.Updated = got.Version, got.EffectiveAt, got.Created, got.Updated
			want.Previous, want.Paused, want.Resumed, want.RunNow = got.Previous, got.Paused, got.Resumed, got.RunNow
			want.Replicas, want.MissingOn = got.Replicas, got.MissingOn
			require.Equal(t, want, got, "%s: the entry read back is the one put", store)

			// The spec fires: a schedule that never fires would stop silently.
			var s schedule.Schedule = schedule.Every(got.Every)
			if got.Cron != "" {
				s, err = schedule.ParseCron("TZ=" + got.TZ + " " + got.Cron)
				require.NoError(t, err, "%s: the stored spec %q (%s) parses", store, got.Cron, got.TZ)
			}
			from := time.Unix(1774746000, 0)
			next := s.Next(from)
			require.True(t, next.After(from), "%s: %s fires after %s: %s", store, got.Spec(), from, next)
		}
		require.True(t, len(refused) == 0 || len(refused) == 2, "refused by %v only", refused)
	})
}
