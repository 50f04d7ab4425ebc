package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// scheduleStore is a store the schedule tests run on: its kind (postgres
// or sqlite) and its --store value.
type scheduleStore struct {
	name, store string
}

// newScheduleStore is a fresh PostgreSQL schema of t's, or a fresh SQLite
// file.
func newScheduleStore(t *testing.T, kind string) scheduleStore {
	t.Helper()
	if kind == "postgres" {
		return scheduleStore{name: kind, store: testenv.PostgresURL(t)}
	}
	return scheduleStore{name: kind, store: filepath.Join(t.TempDir(), "catalog.db")}
}

// eachScheduleStore runs f on PostgreSQL and on SQLite, in parallel.
func eachScheduleStore(t *testing.T, f func(t *testing.T, s scheduleStore)) {
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, newScheduleStore(t, kind))
		})
	}
}

// sched runs `aegis schedule args... --store S`.
func (s scheduleStore) sched(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return run(t, append(append([]string{"schedule"}, args...), "--store", s.store)...)
}

// ok runs a command that must succeed and returns its stdout.
func (s scheduleStore) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := s.sched(t, args...)
	require.Equal(t, 0, code, "%q: %s%s", args, stdout, stderr)
	require.Empty(t, stderr, "%q", args)
	return stdout
}

// listed is an element of `list --json`.
type listed struct {
	Name        string          `json:"name"`
	Namespace   string          `json:"namespace"`
	Spec        string          `json:"spec"`
	Cron        string          `json:"cron"`
	TZ          string          `json:"tz"`
	Every       string          `json:"every"`
	Handler     string          `json:"handler"`
	Args        json.RawMessage `json:"args"`
	Paused      bool            `json:"paused"`
	State       string          `json:"state"`
	Version     int64           `json:"version"`
	EffectiveAt time.Time       `json:"effective_at"`
	Previous    string          `json:"previous"`
	Misfire     string          `json:"misfire"`
	Overlap     string          `json:"overlap"`
	MaxAttempts int             `json:"max_attempts"`
	Replicas    []string        `json:"replicas"`
	MissingOn   []string        `json:"missing_on"`
}

func (s scheduleStore) list(t *testing.T, args ...string) []listed {
	t.Helper()
	out := s.ok(t, append([]string{"list", "--json"}, args...)...)
	var ls []listed
	require.NoError(t, json.Unmarshal([]byte(out), &ls), "%s", out)
	return ls
}

// putLine is put's output. It says "in effect since" when the instant
// passed before it printed (a machine slower than EditDelay).
var putLine = regexp.MustCompile(`^put (\S+): (.+), handler (\S+), version (\d+), (?:takes effect at|in effect since) (\S+)\n$`)

// put, list (table and JSON), pause, resume and rm, as a user types them.
func TestScheduleEdits(t *testing.T) {
	t.Parallel()
	eachScheduleStore(t, func(t *testing.T, s scheduleStore) {
		if s.name == "sqlite" {
			code, _, stderr := s.sched(t, "list")
			require.Equal(t, 1, code, "list of a SQLite file that does not exist: %s", stderr)
			require.Contains(t, stderr, "does not exist (put creates it)")
			_, err := os.Stat(s.store)
			require.ErrorIs(t, err, os.ErrNotExist, "list does not create the SQLite file")
		} else {
			require.Equal(t, "no schedules in namespace \"default\"\n", s.ok(t, "list"))
		}

		before := time.Now()
		out := s.ok(t, "put", "tick", "--every", "1s", "--handler", "echo", "--args", `{"n":1}`)
		m := putLine.FindStringSubmatch(out)
		require.NotNil(t, m, "put's line: %q", out)
		require.Equal(t, []string{"tick", "@every 1s", "echo", "1"}, m[1:5])
		at, err := time.Parse(time.RFC3339Nano, m[5])
		require.NoError(t, err)
		require.WithinDuration(t, before.Add(2*time.Second), at, 10*time.Second, "a new spec takes effect EditDelay (2s) after the put")
		// Flags before NAME, and a cron spec in a zone.
		out = s.ok(t, "put", "--cron", "0 30 2 * * *", "--tz", "Europe/Berlin", "--handler", "report", "nightly", "--overlap", "allow", "--max-attempts", "5")
		require.Regexp(t, `^put nightly: 0 30 2 \* \* \* \(Europe/Berlin\), handler report, version 2, (takes effect at|in effect since) `, out)

		table := s.ok(t, "list")
		lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
		require.Len(t, lines, 3, "%s", table)
		require.Regexp(t, `^NAME\s+SPEC\s+HANDLER\s+STATE\s+VERSION\s+EFFECTIVE\s+REPLICAS$`, lines[0])
		require.Regexp(t, `^nightly\s+0 30 2 \* \* \* \(Europe/Berlin\)\s+report\s+enabled\s+2\s+(at|since) \S+\s+no live replica$`, lines[1])
		require.Regexp(t, `^tick\s+@every 1s\s+echo\s+enabled\s+1\s+(at|since) \S+\s+no live replica$`, lines[2])

		out = s.ok(t, "list", "--json")
		require.Contains(t, out, `"replicas": []`, "an empty list is [], not null")
		ls := s.list(t)
		require.Len(t, ls, 2)
		n, tk := ls[0], ls[1]
		require.JSONEq(t, `{"n":1}`, string(tk.Args))
		tk.Args = nil
		require.Equal(t, listed{Name: "tick", Namespace: "default", Spec: "@every 1s", Every: "1s", Handler: "echo",
			State: "enabled", Version: 1, EffectiveAt: at, Misfire: "fire-once",
			Overlap: "forbid", MaxAttempts: 3, Replicas: []string{}, MissingOn: []string{}}, tk)
		require.Equal(t, "nightly", n.Name)
		require.Equal(t, "0 30 2 * * *", n.Cron)
		require.Equal(t, "Europe/Berlin", n.TZ)
		require.Empty(t, n.Every)
		require.Equal(t, "allow", n.Overlap)
		require.Equal(t, 5, n.MaxAttempts)
		require.JSONEq(t, `{}`, string(n.Args), "args default to {}")

		// An edit before the first spec took effect: no previous spec (its
		// ticks never ran). TestScheduleRunsAndReplicas edits a running one.
		// A loaded machine may reach the edit after the first spec took
		// effect (at): then it is the previous one.
		edited := time.Now()
		out = s.ok(t, "put", "tick", "--every", "2s", "--handler", "echo")
		require.Regexp(t, `^put tick: @every 2s, handler echo, version 3, (takes effect at|in effect since) `, out)
		tk = s.list(t)[1]
		switch {
		case time.Now().Before(at):
			require.Empty(t, tk.Previous, "edited before version 1 took effect at %s", at)
		case edited.After(at):
			require.Equal(t, "@every 1s", tk.Previous, "edited after version 1 took effect at %s", at)
		default: // the put and the effective time crossed: either is right
			require.Contains(t, []string{"", "@every 1s"}, tk.Previous)
		}
		require.Equal(t, "@every 2s", tk.Spec)

		out = s.ok(t, "pause", "tick")
		require.Regexp(t, `^paused tick at \S+, version 4: no tick is claimed from then on\n$`, out)
		tk = s.list(t)[1]
		require.True(t, tk.Paused)
		require.Equal(t, "paused", tk.State)
		require.Regexp(t, `\ntick\s+@every 2s\s+echo\s+paused\s+4\s`, s.ok(t, "list"))
		code, _, stderr := s.sched(t, "run-now", "tick")
		require.Equal(t, 1, code, "run-now of a paused schedule is refused: %s", stderr)
		require.Contains(t, stderr, "tick is paused: resume it first")
		out = s.ok(t, "put", "tick", "--every", "2s", "--handler", "echo")
		require.Contains(t, out, "(paused: resume runs it)", "a put keeps a paused schedule paused")

		out = s.ok(t, "resume", "tick")
		require.Regexp(t, `^resumed tick at \S+, version 6: it runs from its next tick\n$`, out)
		tk = s.list(t)[1]
		require.False(t, tk.Paused)
		require.Equal(t, "enabled", tk.State)
		out = s.ok(t, "run-now", "tick")
		require.Regexp(t, "^asked for a run of tick now \\(fire time \\S+\\): one replica with handler echo runs it, with its own token; `aegis schedule runs tick` shows it\n$", out)
		require.EqualValues(t, 6, s.list(t)[1].Version, "a run now changes no version")
		code, _, stderr = s.sched(t, "run-now", "nope")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, `no schedule "nope" in namespace "default"`)

		// Another namespace sees none of them.
		require.Empty(t, s.list(t, "--namespace", "other"))
		require.Equal(t, "removed tick\n", s.ok(t, "rm", "tick"))
		require.Equal(t, "removed nightly\n", s.ok(t, "rm", "--namespace", "default", "nightly"))
		require.Equal(t, "[]\n", s.ok(t, "list", "--json"))
		require.Equal(t, "no schedules in namespace \"default\"\n", s.ok(t, "list"))
	})
}

// Bad input is refused with a message that names the flag, and nothing is
// written.
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	bigArgs := `{"a":"` + strings.Repeat("x", schedule.MaxArgsLen) + `"}`
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"put", "x", "--cron", "0 61 * * * *", "--handler", "h"}, 2, "--cron: cron spec"},
		{[]string{"put", "x", "--cron", "x y", "--handler", "h"}, 2, "--cron: cron spec"},
		{[]string{"put", "x", "--cron", "0 * * * * *", "--tz", "Mars/Olympus", "--handler", "h"}, 2, `--tz "Mars/Olympus" is not an IANA time zone`},
		{[]string{"put", "x", "--every", "0", "--handler", "h"}, 2, "--every 0s: must be positive"},
		{[]string{"put", "x", "--every", "-1s", "--handler", "h"}, 2, "--every -1s: must be positive"},
		{[]string{"put", "x", "--every", "1500us", "--handler", "h"}, 2, "--every: "},
		{[]string{"put", "x", "--every", "1s", "--tz", "UTC", "--handler", "h"}, 2, "--tz is for a cron spec"},
		{[]string{"put", "x", "--every", "1s", "--cron", "* * * * * *", "--handler", "h"}, 2, "give --cron or --every, not both"},
		{[]string{"put", "x", "--handler", "h"}, 2, "give --cron SPEC or --every D"},
		{[]string{"put", "x", "--cron", " ", "--handler", "h"}, 2, "--cron is empty"},
		{[]string{"put", "x", "--every", "1s"}, 2, "--handler is required"},
		{[]string{"put", "x", "--every", "1s", "--handler", strings.Repeat("h", 151)}, 2, "--handler is 151 bytes, at most 150"},
		{[]string{"put", "", "--every", "1s", "--handler", "h"}, 2, "NAME is empty"},
		{[]string{"put", strings.Repeat("n", 151), "--every", "1s", "--handler", "h"}, 2, "NAME is 151 bytes, at most 150"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--args", "{"}, 2, `--args "{" is not JSON`},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--args", ""}, 2, "--args is empty"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--args", bigArgs}, 2, fmt.Sprintf("--args is %d bytes, at most %d", len(bigArgs), schedule.MaxArgsLen)},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--misfire", "never"}, 2, `--misfire "never"`},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--overlap", "queue"}, 2, `--overlap "queue"`},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--max-attempts", "1001"}, 2, "--max-attempts 1001 is not in 1..1000"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--catch-up", "-1"}, 2, "--catch-up -1"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--lock-at-most-for", "1ms"}, 2, "--lock-at-most-for 1ms is shorter than 10ms"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--deadline", "-1s"}, 2, "--deadline -1s is negative"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--namespace", "Not A Namespace"}, 2, `--namespace "Not A Namespace"`},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--namespace", "other", "--max-attempts", "1001"}, 2, "--max-attempts"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--namespace", ""}, 2, "--namespace is empty"},
		{[]string{"rm", "keep", "--namespace", ""}, 2, "--namespace is empty"},
		{[]string{"put", "x", "y", "--every", "1s", "--handler", "h"}, 2, `unexpected argument "y" after NAME`},
		{[]string{"put", "--every", "1s", "--handler", "h"}, 2, "put: missing NAME"},
		{[]string{"put", "x", "--every", "1s", "--handler", "h", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"rm", "keep", "--namespace", "other"}, 2, `--namespace "other" is unknown`},
		{[]string{"pause", "keep", "--namespace", "other"}, 2, `--namespace "other" is unknown`},
		{[]string{"rm", "nope"}, 1, `no schedule "nope" in namespace "default"`},
		{[]string{"pause", "nope"}, 1, `no schedule "nope" in namespace "default"`},
		{[]string{"resume", "nope"}, 1, `no schedule "nope" in namespace "default"`},
		{[]string{"rm"}, 2, "rm: missing NAME"},
		{[]string{"runs", "keep", "--limit", "0"}, 2, "--limit 0: must be at least 1"},
		{[]string{"list", "keep"}, 2, `list: unexpected argument "keep"`},
		{[]string{"list", "--cron", "* * * * * *"}, 2, "flag provided but not defined: -cron"},
		{[]string{"bogus"}, 2, `unknown subcommand "bogus"`},
		{[]string{"--json"}, 2, `unknown subcommand "--json"`},
	}
	eachScheduleStore(t, func(t *testing.T, s scheduleStore) {
		s.ok(t, "put", "keep", "--every", "1m", "--handler", "h")
		want := s.ok(t, "list", "--json")
		for _, tt := range tests {
			code, stdout, stderr := s.sched(t, tt.args...)
			require.Equal(t, tt.code, code, "%.200q: %s%s", tt.args, stdout, stderr)
			require.Empty(t, stdout, "%.200q", tt.args)
			require.Contains(t, stderr, tt.want, "%.200q", tt.args)
			require.Equal(t, want, s.ok(t, "list", "--json"), "%.200q wrote something", tt.args)
		}
		// The refused edits in namespace "other" left no trace of it.
		code, _, stderr := s.sched(t, "rm", "keep", "--namespace", "other")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, `--namespace "other" is unknown`)
		require.Empty(t, s.list(t, "--namespace", "other"))
	})
}

// The store comes from --store, else $AEGIS_POSTGRES_URL, else
// $AEGIS_SQLITE_PATH; no error shows a URL's password. Not parallel: it
// sets the variables.
func TestScheduleStore(t *testing.T) {
	t.Setenv("AEGIS_POSTGRES_URL", "")
	t.Setenv("AEGIS_SQLITE_PATH", "")
	code, stdout, stderr := run(t, "schedule", "list")
	require.Equal(t, 2, code, "%s%s", stdout, stderr)
	require.Contains(t, stderr, "no store: give --store URL, or set AEGIS_POSTGRES_URL (a PostgreSQL URL) or AEGIS_SQLITE_PATH (a SQLite file)")

	path := filepath.Join(t.TempDir(), "env.db")
	t.Setenv("AEGIS_SQLITE_PATH", path)
	code, _, stderr = run(t, "schedule", "list")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "$AEGIS_SQLITE_PATH: SQLite file "+path+" does not exist (put creates it)")
	code, stdout, stderr = run(t, "schedule", "put", "lite", "--every", "1s", "--handler", "h")
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	for _, store := range []string{path, "sqlite://" + path, "file:" + path} {
		code, stdout, stderr = run(t, "schedule", "list", "--store", store)
		require.Equal(t, 0, code, "%s: %s", store, stderr)
		require.Regexp(t, `\nlite\s+@every 1s\s`, stdout, "%s", store)
	}

	url := testenv.PostgresURL(t)
	t.Setenv("AEGIS_POSTGRES_URL", url) // before AEGIS_SQLITE_PATH
	code, stdout, stderr = run(t, "schedule", "put", "pg", "--every", "1s", "--handler", "h")
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	code, stdout, _ = run(t, "schedule", "list", "--store", url)
	require.Equal(t, 0, code)
	require.Regexp(t, `\npg\s+@every 1s\s`, stdout)
	require.NotContains(t, stdout, "lite")

	addr := closedPort(t)
	down := fmt.Sprintf("postgres://aegis:%s@%s/x?sslmode=disable", secret, addr)
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	u.User = neturl.UserPassword("aegis_no_such_role", secret)
	refused := u.String()
	tests := []struct {
		env, store string
		code       int
		want       string
	}{
		{down, "", 1, "aegis schedule: $AEGIS_POSTGRES_URL: connect to PostgreSQL at " + addr + ": connection refused"},
		{url, down, 1, "aegis schedule: --store: connect to PostgreSQL at " + addr + ": connection refused"},
		{url, refused, 1, "--store: connect to PostgreSQL at " + u.Host + `: authentication failed: role "aegis_no_such_role" does not exist`},
		{url, "postgresql://aegis:" + secret + "%zz@" + addr + "/x", 1, "--store: open PostgreSQL: the URL does not parse"},
		{url, "mysql://aegis:" + secret + "@" + addr + "/x", 2, `--store: unknown scheme "mysql"`},
		{url, "file:" + path + "?mode=ro", 2, "--store: a SQLite URL's query or fragment is not supported"},
		{url, "sqlite://", 2, "--store names no SQLite file"},
		// A URL mistyped without "://" is a path; its password stays hidden.
		{url, "postgres//aegis:" + secret + "@" + addr + "/x", 1, "--store: SQLite file postgres//aegis:xxxxx@" + addr + "/x does not exist"},
	}
	for _, tt := range tests {
		t.Setenv("AEGIS_POSTGRES_URL", tt.env)
		args := []string{"schedule", "list"}
		if tt.store != "" {
			args = append(args, "--store", tt.store)
		}
		code, stdout, stderr := run(t, args...)
		require.Equal(t, tt.code, code, "%s: %s%s", tt.want, stdout, stderr)
		require.Contains(t, stderr, tt.want)
		require.NotContains(t, stdout+stderr, secret)
		require.NotContains(t, stdout+stderr, "aegis:"+secret[:2], "the URL's user and password are not shown")
	}
	code, stdout, stderr = run(t, "schedule", "list", "--store", "")
	require.Equal(t, 2, code, "%s%s", stdout, stderr)
	require.Contains(t, stderr, "--store is empty")

	// Help shows no URL, and is the whole usage.
	t.Setenv("AEGIS_POSTGRES_URL", down)
	code, stdout, _ = run(t, "help", "schedule")
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, secret)
	golden(t, "help-schedule.golden", stdout)
	code, _, stderr = run(t, "schedule", "runs", "-h")
	require.Equal(t, 0, code)
	require.True(t, strings.HasPrefix(stderr, "usage: aegis schedule list "), "%s", stderr)
	require.Contains(t, stderr, "\n  -limit int")
	require.NotContains(t, stderr, "\n  -cron ", "runs -h lists the flags of runs")
}

// schedReplica is a replica of the test: a run-key Scheduler with the
// catalog on s's store and the given handlers.
func schedReplica(t *testing.T, s scheduleStore, node string, handlers map[string]schedule.Handler) {
	t.Helper()
	ctx := context.Background()
	var db *sql.DB
	if s.name == "postgres" {
		pool, err := pgxpool.New(ctx, s.store)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		db = stdlib.OpenDBFromPool(pool)
	} else {
		var err error
		db, err = sqlitelease.Open(s.store)
		require.NoError(t, err)
	}
	t.Cleanup(func() { db.Close() })
	store, err := schedule.NewStore(ctx, db, nil)
	require.NoError(t, err)
	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(t, err)
	sc, err := schedule.New(&schedule.Config{Node: node, Store: store, Catalog: cat})
	require.NoError(t, err)
	for name, h := range handlers {
		require.NoError(t, sc.Handle(name, h))
	}
	require.NoError(t, sc.Start(ctx))
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { sc.Stop(); close(done) }()
		testenv.Recv(t, done, 30*time.Second, "replica "+node+" to stop")
	})
}

// ranRun is an element of `runs --json`.
type ranRun struct {
	Job       string     `json:"job"`
	Namespace string     `json:"namespace"`
	Fire      time.Time  `json:"fire"`
	Node      string     `json:"node"`
	Token     int64      `json:"token"`
	Attempt   int        `json:"attempt"`
	Outcome   string     `json:"outcome"`
	Started   *time.Time `json:"started"`
	Ended     *time.Time `json:"ended"`
	Error     string     `json:"error"`
	Cause     string     `json:"cause"`
	Detail    string     `json:"detail"`
}

func (s scheduleStore) runs(t *testing.T, args ...string) []ranRun {
	t.Helper()
	out := s.ok(t, append([]string{"runs", "--json"}, args...)...)
	var rs []ranRun
	require.NoError(t, json.Unmarshal([]byte(out), &rs), "%s", out)
	return rs
}

// runs shows what a real replica ran; list names the replicas that lack a
// schedule's handler.
func TestScheduleRunsAndReplicas(t *testing.T) {
	t.Parallel()
	eachScheduleStore(t, func(t *testing.T, s scheduleStore) {
		args := make(chan json.RawMessage, 100)
		schedReplica(t, s, "h2-node-a", map[string]schedule.Handler{
			"echo": func(_ context.Context, a json.RawMessage) error {
				select {
				case args <- a:
				default:
				}
				return nil
			},
			"fail": func(context.Context, json.RawMessage) error { return errors.New("disk full\non /data") },
		})
		s.ok(t, "put", "tick", "--every", "1s", "--handler", "echo", "--args", `{"n":1}`)
		s.ok(t, "put", "boom", "--every", "1s", "--handler", "fail")

		var ok ranRun
		require.Eventually(t, func() bool {
			for _, r := range s.runs(t, "tick") {
				if r.Outcome == "succeeded" {
					ok = r
					return true
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond, "a run of tick succeeds")
		require.JSONEq(t, `{"n":1}`, string(testenv.Recv(t, args, 10*time.Second, "the handler's args")))
		require.Equal(t, "tick", ok.Job)
		require.Equal(t, "default", ok.Namespace)
		require.Equal(t, "h2-node-a", ok.Node)
		require.Positive(t, ok.Token)
		require.Equal(t, 1, ok.Attempt)
		require.Zero(t, ok.Fire.UnixMilli()%1000, "an @every 1s tick is on a second: %s", ok.Fire)
		require.NotNil(t, ok.Started)
		require.NotNil(t, ok.Ended)
		require.False(t, ok.Ended.Before(*ok.Started), "ended %s before started %s", ok.Ended, ok.Started)
		require.Empty(t, ok.Error)

		require.Eventually(t, func() bool { return len(s.runs(t, "tick")) >= 2 }, 30*time.Second, 100*time.Millisecond, "two runs of tick")
		all := s.runs(t, "tick")
		require.True(t, all[0].Fire.After(all[1].Fire), "newest first: %s, then %s", all[0].Fire, all[1].Fire)
		rs := s.runs(t, "tick", "--limit", "1")
		require.Len(t, rs, 1)
		// A tick may have run since: the newest then is no older.
		require.False(t, rs[0].Fire.Before(all[0].Fire), "--limit 1 is the newest: %s, not %s", all[0].Fire, rs[0].Fire)
		require.Equal(t, "[]\n", s.ok(t, "runs", "tick", "--json", "--namespace", "other"), "another namespace has no runs of tick")
		require.Equal(t, "no runs of \"nope\" in namespace \"default\"\n", s.ok(t, "runs", "nope"))

		table := s.ok(t, "runs", "tick")
		require.Regexp(t, `^FIRE\s+NODE\s+TOKEN\s+ATTEMPT\s+STARTED\s+ENDED\s+OUTCOME\n`, table)
		require.Regexp(t, `\n\S+\s+h2-node-a\s+\d+\s+1\s+\S+\s+\S+\s+succeeded\n`, table)
		var failed ranRun
		require.Eventually(t, func() bool {
			for _, r := range s.runs(t, "boom") {
				if r.Outcome == "failed" {
					failed = r
					return true
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond, "a run of boom fails")
		require.Equal(t, "disk full\non /data", failed.Error, "--json has the error whole")
		require.Regexp(t, `\n\S+\s+h2-node-a\s+\d+\s+1\s+\S+\s+\S+\s+failed: disk full on /data\n`, s.ok(t, "runs", "boom", "--limit", "1000"))

		// A replica without echo: list names it (its heartbeat is written
		// when it starts).
		schedReplica(t, s, "h2-node-b", map[string]schedule.Handler{"fail": func(context.Context, json.RawMessage) error { return nil }})
		code, out, stderr := s.sched(t, "put", "orphan", "--every", "1h", "--handler", "nobody")
		require.Equal(t, 0, code, "%s%s", out, stderr)
		require.Regexp(t, putLine, out)
		require.Regexp(t, `^warning: no live replica has handler "nobody" \(live: h2-node-a(, h2-node-b)?\): orphan does not run\n$`, stderr)
		require.Eventually(t, func() bool {
			for _, e := range s.list(t) {
				if e.Name == "tick" {
					return len(e.MissingOn) == 1
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond, "list sees h2-node-b")
		byName := map[string]listed{}
		for _, e := range s.list(t) {
			byName[e.Name] = e
		}
		require.Equal(t, []string{"h2-node-a"}, byName["tick"].Replicas)
		require.Equal(t, []string{"h2-node-b"}, byName["tick"].MissingOn)
		require.Equal(t, []string{"h2-node-a", "h2-node-b"}, byName["boom"].Replicas)
		require.Empty(t, byName["boom"].MissingOn)
		require.Empty(t, byName["orphan"].Replicas)
		require.Equal(t, []string{"h2-node-a", "h2-node-b"}, byName["orphan"].MissingOn)

		table = s.ok(t, "list")
		require.Regexp(t, `\nboom\s.*\s2/2\n`, table)
		require.Regexp(t, `\norphan\s.*\snone has handler nobody\n`, table)
		require.Regexp(t, `\ntick\s.*\s1/2\n`, table)
		require.Contains(t, table, "\nwarning: orphan does not run: no live replica has handler \"nobody\" (missing on h2-node-a, h2-node-b)\n")
		require.Contains(t, table, "\nwarning: tick: handler \"echo\" is missing on h2-node-b (its ticks run on the others)\n")
		require.NotContains(t, table, "warning: boom")

		// A schedule no replica has the handler of: its ticks are missed,
		// cause unbound, each once (whichever replica recorded it).
		code, out, stderr = s.sched(t, "put", "lonely", "--every", "1s", "--handler", "nobody")
		require.Equal(t, 0, code, "%s%s", out, stderr)
		var missed []ranRun
		require.Eventually(t, func() bool {
			missed = s.runs(t, "lonely")
			return len(missed) >= 2
		}, 30*time.Second, 100*time.Millisecond, "two missed ticks of lonely")
		for _, m := range missed {
			require.Equal(t, "missed", m.Outcome)
			require.Equal(t, "unbound", m.Cause)
			require.Regexp(t, `^no replica bound it: h2-node-[ab] has no handler "nobody"$`, m.Detail)
			require.Nil(t, m.Started)
		}
		require.True(t, missed[0].Fire.After(missed[1].Fire), "one line per tick, newest first")
		require.Regexp(t, `\n\S+\s+h2-node-[ab]\s+-\s+-\s+-\s+-\s+missed \(unbound\): no replica bound it: `, s.ok(t, "runs", "lonely"))
		s.ok(t, "rm", "lonely")

		// An edit of a spec in effect: the previous one until the new one
		// takes effect.
		out = s.ok(t, "put", "tick", "--every", "2s", "--handler", "echo")
		m := putLine.FindStringSubmatch(out)
		require.NotNil(t, m, "put's line: %q", out)
		e := s.list(t)[2]
		require.Equal(t, "tick", e.Name)
		require.Equal(t, "@every 1s", e.Previous)
		require.Equal(t, m[5], stamp(e.EffectiveAt))
		table = s.ok(t, "list")
		if time.Now().Before(e.EffectiveAt) { // so it was when list ran
			require.Regexp(t, `\ntick\s+@every 2s\s+echo\s+enabled\s+\d+\s+at `+regexp.QuoteMeta(m[5])+` \(until then @every 1s\)\s+1/2\n`, table)
		} else {
			require.Regexp(t, `\ntick\s+@every 2s\s+echo\s+enabled\s+\d+\s+since `+regexp.QuoteMeta(m[5])+`\s+1/2\n`, table)
		}
	})
}

// A put that is refused writes nothing: no SQLite file, no table in the
// PostgreSQL schema. Everything put takes is checked before the store is
// opened.
func TestScheduleRefusedPutLeavesNothing(t *testing.T) {
	t.Parallel()
	refused := [][]string{
		{"x", "--cron", "0 61 * * * *", "--handler", "h"},
		{"x", "--cron", "0 * * * * *", "--tz", "Mars/Olympus", "--handler", "h"},
		{"x", "--cron", "TZ=UTC 0 * * * * *", "--handler", "h"},
		{"x", "--every", "1500us", "--handler", "h"},
		{"x", "--every", "1s", "--tz", "UTC", "--handler", "h"},
		{"x", "--every", "1s"},
		{"x", "--every", "1s", "--handler", strings.Repeat("h", 151)},
		{strings.Repeat("n", 151), "--every", "1s", "--handler", "h"},
		{"x", "--every", "1s", "--handler", "h", "--args", "{"},
		{"x", "--every", "1s", "--handler", "h", "--misfire", "never"},
		{"x", "--every", "1s", "--handler", "h", "--max-attempts", "1001"},
		{"x", "--every", "1s", "--handler", "h", "--catch-up", "-1"},
		{"x", "--every", "1s", "--handler", "h", "--lock-at-most-for", "1ms"},
		{"x", "--every", "1s", "--handler", "h", "--lock-at-least-for", "1m"},
		{"x", "--every", "1s", "--handler", "h", "--deadline", "-1s"},
		{"x", "--every", "1s", "--handler", "h", "--namespace", "Not A Namespace"},
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "catalog.db")
		for _, args := range refused {
			code, stdout, stderr := run(t, append([]string{"schedule", "put", "--store", path}, args...)...)
			require.Equal(t, 2, code, "%.200q: %s%s", args, stdout, stderr)
			_, err := os.Stat(path)
			require.ErrorIs(t, err, os.ErrNotExist, "%.200q created the SQLite file", args)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := testenv.PostgresURL(t)
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		for _, args := range refused {
			code, stdout, stderr := run(t, append([]string{"schedule", "put", "--store", url}, args...)...)
			require.Equal(t, 2, code, "%.200q: %s%s", args, stdout, stderr)
			var tables []string
			rows, err := pool.Query(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
			require.NoError(t, err)
			for rows.Next() {
				var name string
				require.NoError(t, rows.Scan(&name))
				tables = append(tables, name)
			}
			require.NoError(t, rows.Err())
			require.Empty(t, tables, "%.200q created tables", args)
		}
	})
}

// A catalog row this version cannot read (written by hand) is listed as
// such, with what is wrong with it, beside the others; the exit status
// says the catalog needs a look.
func TestScheduleListBadRow(t *testing.T) {
	t.Parallel()
	eachScheduleStore(t, func(t *testing.T, s scheduleStore) {
		s.ok(t, "put", "good", "--every", "1m", "--handler", "h")
		s.ok(t, "put", "bad", "--every", "1m", "--handler", "h")
		var db *sql.DB
		var err error
		if s.name == "postgres" {
			db, err = sql.Open("pgx", s.store)
		} else {
			db, err = sqlitelease.Open(s.store)
		}
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		_, err = db.Exec(`UPDATE aegis_schedule SET spec = '@every banana' WHERE name = 'bad'`)
		require.NoError(t, err)

		code, stdout, stderr := s.sched(t, "list")
		require.Equal(t, 1, code, "%s%s", stdout, stderr)
		require.Regexp(t, `\ngood\s+@every 1m0s\s+h\s+enabled\s+1\s`, stdout)
		require.Regexp(t, `\nbad\s+-\s+-\s+unreadable\s+-\s+-\s+-\n`, stdout, "in the table")
		require.Regexp(t, `\nbad\s+unreadable: schedule: catalog row "bad": spec "@every banana" is not an interval\n`, stdout)
		require.Contains(t, stderr, `1 catalog row of namespace "default" cannot be read (listed as unreadable)`)

		code, stdout, stderr = s.sched(t, "list", "--json")
		require.Equal(t, 1, code, "%s%s", stdout, stderr)
		var ls []struct {
			listed
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &ls), "%s", stdout)
		require.Len(t, ls, 2)
		require.Equal(t, "bad", ls[0].Name, "by name")
		require.Equal(t, "unreadable", ls[0].State)
		require.Contains(t, ls[0].Error, `spec "@every banana" is not an interval`)
		require.Equal(t, "good", ls[1].Name)
		require.Empty(t, ls[1].Error)
		require.Equal(t, "enabled", ls[1].State)
	})
}
