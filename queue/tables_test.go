package queue

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// Two services on one database and one schema, each with its own job
// table (one named with its schema, one found on the search_path), next
// to the default tables: each works only its own jobs, woken by its own
// channel (polling is an hour: only a notification wakes a client), each
// pauses only its own queues, and each inspector counts only its own jobs.
func TestTwoTablesShareASchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := pool(t) // the default tables, migrated
	var schema string
	require.NoError(t, p.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))

	type service struct {
		name  string
		table string
		c     *Client
		seen  set // jobs handled, by N
		wrong chan int
	}
	services := []*service{
		{name: "billing", table: "billing_job"},
		{name: "mail", table: schema + ".mail_job"},
	}
	const jobs = 20
	for i, s := range services {
		s.wrong = make(chan int, jobs*len(services))
		base := i * 1000 // each service's jobs carry N in its own range
		s.c = client(t, p, &Config{
			Table:        s.table,
			Queues:       map[string]QueueConfig{"work": {MaxWorkers: 4}},
			PollInterval: time.Hour,
			Workers: workers(func(_ context.Context, job *Job[testArgs]) error {
				if job.Args.N < base || job.Args.N >= base+1000 {
					s.wrong <- job.Args.N
				}
				s.seen.add(int64(job.Args.N))
				return nil
			}),
		})
		require.NoError(t, s.c.Migrate(ctx))
		require.NoError(t, s.c.Migrate(ctx), "migrating again is a no-op")
		require.NoError(t, s.c.Start(ctx))
	}
	require.NotEqual(t, services[0].c.channel, services[1].c.channel)
	var defChannel string
	require.NoError(t, p.QueryRow(ctx, channelNameSQL).Scan(&defChannel))
	for _, s := range services {
		require.NotEqual(t, defChannel, s.c.channel, "%s: the default tables' channel", s.name)
	}

	for i, s := range services {
		for n := range jobs {
			_, err := s.c.Enqueue(ctx, testArgs{N: i*1000 + n}, &EnqueueOpts{Queue: "work"})
			require.NoError(t, err)
		}
		// A queue no client works, and a paused one: the inspectors count them.
		for n := range i + 2 {
			_, err := s.c.Enqueue(ctx, testArgs{N: i*1000 + 500 + n}, &EnqueueOpts{Queue: "idle"})
			require.NoError(t, err)
		}
		require.NoError(t, s.c.Pause(ctx, "idle-"+s.name))
	}
	for _, s := range services {
		table, err := migrate.Table("table", s.table)
		require.NoError(t, err)
		eventually(t, s.name+"'s jobs worked and completed", func() bool {
			return s.seen.len() == jobs && count(t, p, `SELECT count(*) FROM `+table+` WHERE queue = 'work'`) == 0
		})
	}
	for _, s := range services {
		require.Empty(t, s.wrong, "%s worked another service's job", s.name)
		paused, err := s.c.Paused(ctx, "idle-"+s.name)
		require.NoError(t, err)
		require.True(t, paused)
		for _, o := range services {
			if o != s {
				paused, err := s.c.Paused(ctx, "idle-"+o.name)
				require.NoError(t, err)
				require.False(t, paused, "%s sees %s's paused queue", s.name, o.name)
			}
		}
	}
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job`), "a job in the default table")

	for i, s := range services {
		in, err := NewInspectorFromPool(p, &Config{Table: s.table})
		require.NoError(t, err)
		require.Equal(t, s.table, in.Table())
		missing, err := in.Missing(ctx)
		require.NoError(t, err)
		require.Empty(t, missing)
		sum, err := in.Summary(ctx)
		require.NoError(t, err)
		var lines []string
		for _, q := range sum {
			lines = append(lines, q.Queue+":"+strconv.FormatInt(q.Counts[StateAvailable], 10)+":"+strconv.FormatBool(q.Paused))
		}
		require.Equal(t, []string{"idle:" + strconv.Itoa(i+2) + ":false", "idle-" + s.name + ":0:true"}, lines, "%s's inspector", s.name)
	}
	in, err := NewInspectorFromPool(p, nil)
	require.NoError(t, err)
	sum, err := in.Summary(ctx)
	require.NoError(t, err)
	require.Empty(t, sum, "the default tables' inspector")
}

// With the default table every statement and migration is the text it
// always was, recorded under the key "queue": a database migrated before
// Config.Table existed keeps working, its objects named as they were.
func TestDefaultTablesUnchanged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := poolWithoutTables(t)
	// Yesterday's migration: the migrations under the key "queue".
	db := stdlib.OpenDBFromPool(p)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, migrate.Apply(ctx, db, migrate.Postgres, "queue", migrations))

	c := client(t, p, &Config{
		Queues:  map[string]QueueConfig{"default": {MaxWorkers: 1}},
		Workers: workers(func(context.Context, *Job[testArgs]) error { return nil }),
	})
	require.NoError(t, c.Migrate(ctx))
	require.Equal(t, len(migrations), count(t, p, `SELECT count(*) FROM aegis_migrations WHERE component = 'queue'`))
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_migrations WHERE component LIKE 'queue:%'`), "the default table's own key")
	require.NoError(t, c.Start(ctx))
	res, err := c.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
	eventually(t, "the job worked", func() bool {
		return count(t, p, `SELECT count(*) FROM aegis_job WHERE id = $1`, res.Job.ID) == 0
	})
	var names []string
	rows, err := p.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace
		AND relname LIKE 'aegis\_%' AND relkind IN ('r', 'i') AND relname NOT LIKE '%pkey' AND relname NOT LIKE 'aegis_migrations%' ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"aegis_job", "aegis_job_dead", "aegis_job_fetch", "aegis_job_finished", "aegis_job_finished_at",
		"aegis_job_running", "aegis_job_scheduled", "aegis_job_unique", "aegis_queue"}, names)
	require.Equal(t, 1, count(t, p, `SELECT count(*) FROM pg_proc WHERE proname = 'aegis_job_next' AND pronamespace = current_schema()::regnamespace`))

	tb, err := newTables("Config.Table", "")
	require.NoError(t, err)
	for _, s := range sqlLiterals(t) {
		require.Equal(t, s, tb.sql(s))
	}
	require.Equal(t, "queue", tb.component())
}

// Every statement of the package, renamed for another table, names no
// object of the default tables: a statement added with a name that the
// renaming does not know fails here.
func TestEveryStatementRenamed(t *testing.T) {
	t.Parallel()
	for _, table := range []string{"jobs", "billing.jobs", "billing.aegis_job"} {
		tb, err := newTables("Config.Table", table)
		require.NoError(t, err)
		for _, s := range sqlLiterals(t) {
			r := tb.sql(s)
			for _, n := range objectName.FindAllString(r, -1) {
				if table == "billing.aegis_job" && strings.Contains(r, `"`+n+`"`) {
					continue // the default names, in the schema billing
				}
				require.Equal(t, "aegis_queue_", n, "%s: %q left in %s", table, n, r)
			}
		}
		require.Equal(t, "queue:"+table, tb.component())
	}
}

// sqlLiterals are the package's string literals that name its objects
// (the fragments its statements are built from).
func sqlLiterals(t *testing.T) []string {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "tables.go" || f == "metrics.go" {
			continue // metrics.go: metric names, not tables
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && objectName.MatchString(lit.Value) {
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out = append(out, s)
			}
			return true
		})
	}
	require.Greater(t, len(out), 40, "the statements were found")
	return slices.Compact(out)
}

// Config.Table is checked when the client is made.
func TestConfigTable(t *testing.T) {
	t.Parallel()
	p := poolWithoutTables(t)
	for _, bad := range []string{"bad-name", "a.b.c", strings.Repeat("x", 51), "1job"} {
		_, err := New(p, &Config{Table: bad})
		require.ErrorIs(t, err, aegis.ErrInvalid, bad)
		require.ErrorContains(t, err, "Config.Table", bad)
		_, err = NewInspectorFromPool(p, &Config{Table: bad})
		require.ErrorIs(t, err, aegis.ErrInvalid, bad)
	}
	_, err := NewInspectorFromPool(nil, nil)
	require.ErrorIs(t, err, aegis.ErrInvalid)
	_, err = New(p, &Config{Table: strings.Repeat("x", 50)})
	require.NoError(t, err)
}

// TestTablesOfAnOlderVersion: tables an older version made (v0.1.0's
// migrations 1 to 3, without the trace context's column) make Enqueue
// say to upgrade them, and Migrate does.
func TestTablesOfAnOlderVersion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := poolWithoutTables(t)
	db := stdlib.OpenDBFromPool(p)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, migrate.Apply(ctx, db, migrate.Postgres, "queue", migrations[:3]))
	c := client(t, p, &Config{AllowUnknownKinds: true})
	_, err := c.Enqueue(ctx, testArgs{}, nil)
	require.ErrorContains(t, err, "to upgrade the queue's tables: an older version created them")
	require.NoError(t, c.Migrate(ctx))
	_, err = c.Enqueue(ctx, testArgs{}, nil)
	require.NoError(t, err)
}
