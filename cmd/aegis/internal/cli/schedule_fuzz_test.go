package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// The flags of put that FuzzSchedulePut gives, one bit of its mask each.
var putFlags = []string{"cron", "every", "tz", "handler", "args", "misfire", "overlap", "deadline", "lock-at-most-for", "namespace"}

// FuzzSchedulePut parses `aegis schedule put` with fuzzed values for the
// flags its mask gives: it is refused as a usage error (exit 2, before
// any store is opened), or its entry is what the flags say; the catalog
// (SQLite) then stores that entry or refuses it with an error that
// catalogError turns into a usage error naming a flag, never a field of
// the Go API.
func FuzzSchedulePut(f *testing.F) {
	type seed struct {
		name, cron, every, tz, handler, args, misfire, overlap, deadline, most, ns string
		mask                                                                       uint16
	}
	for _, s := range []seed{
		{name: "nightly", cron: "0 30 2 * * *", tz: "Europe/Berlin", handler: "export", args: `{"a":1}`, mask: 0b11101},
		{name: "tick", every: "1s", handler: "h", misfire: "catch-up", overlap: "allow", deadline: "2s", most: "1m", ns: "billing", mask: 0b1111101010},
		{name: "-x", every: "1500us", handler: "h", mask: 0b1010},
		{name: "n", every: "1s", handler: "h", deadline: "500us", mask: 0b10001010},
		{name: "n", every: "1s", handler: "h", most: "5ms", mask: 0b100001010},
		{name: "n", every: "-1s", handler: "h", mask: 0b1010},
		{name: "n", cron: " ", handler: "h", mask: 0b1001},
		{name: "n", cron: "@every 1s", handler: "h", mask: 0b1001},
		{name: "n", cron: "* * * * * *", tz: "Local", handler: "h", mask: 0b1101},
		{name: "n", every: "1s", handler: "h", args: "\"\xff\"", mask: 0b11010},
		{name: "n", every: "1s", handler: "h", misfire: "never", mask: 0b101010},
		{name: "n", every: "1s", handler: "h", ns: "", mask: 0b1000001010},
		{name: "n\x00", every: "1s", handler: "h\xff", mask: 0b1010},
	} {
		f.Add(s.name, s.cron, s.every, s.tz, s.handler, s.args, s.misfire, s.overlap, s.deadline, s.most, s.ns, s.mask)
	}
	ctx := context.Background()
	db, err := sqlitelease.Open(filepath.Join(f.TempDir(), "catalog.db"))
	require.NoError(f, err)
	f.Cleanup(func() { db.Close() })
	catalogs := map[string]*schedule.Catalog{}
	f.Fuzz(func(t *testing.T, name, cron, every, tz, handler, args, misfire, overlap, deadline, most, ns string, mask uint16) {
		values := []string{cron, every, tz, handler, args, misfire, overlap, deadline, most, ns}
		argv := []string{"put"}
		for i, fl := range putFlags {
			if mask&(1<<i) != 0 {
				argv = append(argv, "--"+fl, values[i])
			}
		}
		argv = append(argv, "--", name)
		c, err := parseSchedule(argv, io.Discard)
		if err != nil {
			var ue *usageError
			require.True(t, errors.As(err, &ue) || errors.Is(err, errFlagsReported), "%q: %v is not a usage error (exit 2)", argv, err)
			return
		}
		given := func(fl string) bool { return c.given[fl] }
		e := c.entry
		require.Equal(t, name, e.Name)
		require.Equal(t, handler, e.Handler)
		require.Equal(t, map[bool]string{true: cron}[given("cron")], e.Cron)
		require.Equal(t, map[bool]string{true: tz}[given("tz")], e.TZ)
		require.Equal(t, map[bool]string{true: args}[given("args")], string(e.Args))
		for _, d := range []struct {
			flag string
			got  time.Duration
			def  time.Duration
		}{{"every", e.Every, 0}, {"deadline", e.StartingDeadline, 0}, {"lock-at-most-for", e.LockAtMostFor, 30 * time.Second}} {
			want := d.def
			if given(d.flag) {
				var err error
				want, err = time.ParseDuration(values[indexOf(d.flag)])
				require.NoError(t, err, "--%s was accepted", d.flag)
			}
			require.Equal(t, want, d.got, "--%s", d.flag)
		}
		require.Equal(t, map[bool]string{true: misfire, false: "fire-once"}[given("misfire")], e.Misfire.String())
		require.Equal(t, map[bool]string{true: overlap, false: "forbid"}[given("overlap")], e.Overlap.String())

		cat := catalogs[c.f.ns]
		if cat == nil {
			if cat, err = schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: c.f.ns}); err != nil {
				require.ErrorIs(t, err, aegis.ErrInvalid, "--namespace %q", c.f.ns)
				usageNamesFlag(t, catalogError(err, name, c.f.ns))
				return
			}
			catalogs[c.f.ns] = cat
		}
		put, err := cat.Put(ctx, e)
		if err != nil {
			require.ErrorIs(t, err, aegis.ErrInvalid, "%q", argv)
			usageNamesFlag(t, catalogError(err, name, c.f.ns))
			return
		}
		require.Equal(t, name, put.Name)
		if given("args") {
			require.True(t, json.Valid(put.Args))
		}
	})
}

func indexOf(flag string) int {
	for i, f := range putFlags {
		if f == flag {
			return i
		}
	}
	panic(flag)
}

// usageNamesFlag checks a refusal as the command line says it: a usage
// error that names NAME or a flag, and no field of the Go API.
func usageNamesFlag(t *testing.T, err error) {
	t.Helper()
	var ue *usageError
	require.ErrorAs(t, err, &ue)
	msg := err.Error()
	require.True(t, strings.Contains(msg, "--") || strings.Contains(msg, "NAME"), "%q names no flag", msg)
	for _, api := range []string{"Entry.", "Job.", "CatalogConfig.", "aegis: invalid argument"} {
		require.NotContains(t, msg, api, "%q", msg)
	}
}

// FuzzStoreFlag: --store is a PostgreSQL URL (given as it is), a SQLite
// path, or a usage error that shows nothing after "://": v's user and
// password there never appear in it. A sqlite:// or file: value's path is
// its rest, without a query or fragment, which sqlitelease.Open would take
// as part of the file's name.
func FuzzStoreFlag(f *testing.F) {
	for _, s := range []string{"postgres://u:secret@h/db", "POSTGRESQL://h", "sqlite:///tmp/a.db", "file:a.db", "file:a.db?mode=ro", "sqlite://", "a.db",
		"mysql://u:secret@h/db", "redis://:secret@h", "://secret", "sqlite://a#b", "x://y://z"} {
		f.Add(s)
	}
	const password = "Pa55-w0rd"
	f.Fuzz(func(t *testing.T, v string) {
		if scheme, rest, ok := strings.Cut(v, "://"); ok && !strings.Contains(scheme, password) {
			// v with a password after its scheme.
			_, _, err := parseStoreFlag(scheme + "://user:" + password + "@" + rest)
			if err != nil {
				require.NotContains(t, err.Error(), password)
			}
		}
		if v == "" {
			return // openScheduleStore refuses it first
		}
		pg, path, err := parseStoreFlag(v)
		if err != nil {
			var ue *usageError
			require.ErrorAs(t, err, &ue)
			return
		}
		require.True(t, (pg == "") != (path == ""), "one store: %q, %q", pg, path)
		lower := strings.ToLower(v)
		switch {
		case pg != "":
			require.Equal(t, v, pg)
			require.True(t, strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://"), "%q is PostgreSQL", v)
		case strings.HasPrefix(lower, "sqlite://") || strings.HasPrefix(lower, "file:"):
			require.True(t, strings.HasSuffix(v, path), "%q: path %q", v, path)
			require.NotContains(t, path, "?")
			require.NotContains(t, path, "#")
		default:
			require.Equal(t, v, path)
			require.NotContains(t, v, "://")
		}
	})
}
