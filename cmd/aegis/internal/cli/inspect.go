package cli

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/queue"

	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/schedule"
)

var inspectCommand = command{
	name:    "inspect",
	summary: "the runbook's queries on a PostgreSQL store (stuck, missed, lost, expired, tokens, duplicates)",
	run:     runInspect,
}

const inspectUsage = `
usage: aegis inspect [--postgres-url URL] [--older-than 10m] [--key K] [--limit 20] [--namespace NS] [--queue-table T] [--fence-table T] [QUERY...]

Inspect asks a PostgreSQL database the runbook's questions
about the tables Aegis keeps there: the schedule's run
table, its attempt history and missed ticks, pglease's
lease table, the lab's audit, the queue's jobs, the
fence's refusal log. QUERY is one of

	stuck       runs RUNNING past their lease, started longer than
	            --older-than ago: a crashed winner the reaper must retry
	missed      the latest ticks of --namespace's schedules that no
	            replica started by their starting deadline, with their
	            cause (held, unbound, paused, misfire, store, down) and
	            the replica that recorded them
	lost        the latest attempts of --namespace's schedules whose
	            lease was lost (their run row expired, a later attempt
	            took the tick): lost, or refused by the fence when they
	            ran on to their end; either way their tick ran twice.
	            With the attempt that took the tick
	expired     leases that ran out instead of being released
	tokens      the token history of --key (lab-RUN/JOB for a lab run's
	            job, in lower case; every run's when unset)
	duplicates  recent job ticks whose effect was committed more than once
	jobs        the queue's jobs running past their lease (their worker
	            paused or died; a started client's reaper reclaims
	            them), the longest past first, of --queue-table
	refused     the writes the fence refused, the newest first, from
	            the refusal log of --fence-table

None means all. A question whose table is missing is skipped.
--queue-table and --fence-table are the tables a service configured
(queue.Config.Table, fence.Config.Table; optionally schema-qualified).
`

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", stderr, inspectUsage)
	url := fs.String("postgres-url", "", "PostgreSQL `URL` (default $AEGIS_POSTGRES_URL; not shown, it may carry a password)")
	var o runner.InspectOptions
	fs.DurationVar(&o.OlderThan, "older-than", 10*time.Minute, "how long a claim may stay RUNNING before it is stuck")
	fs.StringVar(&o.Key, "key", "", "the lease `key` whose token history to show")
	fs.IntVar(&o.Limit, "limit", 20, "rows per answer")
	ns := fs.String("namespace", schedule.DefaultNamespace, "the schedules' `namespace` that missed and lost read")
	var tables inspectTables
	fs.StringVar(&tables.queue, "queue-table", queue.DefaultTable, "the queue's job `table` that jobs reads (queue.Config.Table)")
	fs.StringVar(&tables.fence, "fence-table", fence.DefaultTable, "the fence `table` whose refusal log refused reads (fence.Config.Table)")
	if err := fs.parse(args); err != nil {
		return err
	}
	known := inspectOrder()
	for _, a := range fs.Args() {
		if !slices.Contains(known, a) {
			return usagef("unknown query %q (known: %s)", a, strings.Join(known, ", "))
		}
	}
	// $AEGIS_POSTGRES_URL stands in for the flag when it is not given; a
	// flag given empty is empty.
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "postgres-url" })
	if !given {
		*url = os.Getenv(servers.EnvPostgresURL)
	}
	switch {
	case *url == "":
		return usagef("--postgres-url (or AEGIS_POSTGRES_URL) is required")
	case o.OlderThan <= 0:
		return usagef("--older-than %s: must be positive", o.OlderThan)
	case o.Limit < 1:
		return usagef("--limit %d: must be at least 1", o.Limit)
	case *ns == "":
		return usagef("--namespace is empty")
	}
	if err := checkTables(tables.queue, tables.fence); err != nil {
		return err
	}
	db, closeDB, err := openPostgres(ctx, *url)
	if err != nil {
		return err
	}
	defer closeDB()
	answers, err := inspect(ctx, db, fs.Args(), o, *ns, tables)
	if err != nil {
		return err
	}
	printAnswers(stdout, answers)
	return nil
}

// printAnswers prints each answer under its query's name and title, its
// rows aligned.
func printAnswers(stdout io.Writer, answers []runner.InspectAnswer) {
	for i, a := range answers {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s — %s\n", a.Query.Name, a.Query.Title)
		switch {
		case a.Skipped != "":
			fmt.Fprintf(stdout, "  (skipped: %s)\n", a.Skipped)
			continue
		case len(a.Rows) == 0:
			fmt.Fprintln(stdout, "  (none)")
			continue
		}
		tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\n", strings.Join(a.Columns, "\t"))
		for _, row := range a.Rows {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = shown(c)
			}
			fmt.Fprintf(tw, "  %s\n", strings.Join(cells, "\t"))
		}
		_ = tw.Flush()
	}
}

// historyQuery is a question of the schedule's attempt history or missed
// ticks, which the lab's runbook does not ask: read through
// schedule.RunReader, in one namespace (the reader's).
type historyQuery struct {
	name, title, table string
	columns            []string
	read               func(ctx context.Context, r *schedule.RunReader, limit int) ([][]string, error)
}

// historyQueries are asked after stuck, in this order.
var historyQueries = []historyQuery{
	{
		name: "missed", title: "missed ticks: ticks no replica started by their starting deadline, the newest first, with their cause",
		table:   "aegis_schedule_run_missed",
		columns: []string{"namespace", "job", "fire_at", "cause", "recorded_by", "recorded_at", "detail"},
		read:    missedTicks,
	},
	{
		name: "lost", title: "attempts whose lease was lost: a later attempt took the tick over while they ran (refused: they ran on to their end and the fence refused their outcome write); their ticks ran twice, the newest first",
		table:   "aegis_schedule_run_attempt",
		columns: []string{"namespace", "job", "fire_at", "node", "token", "attempt", "outcome", "ended_at", "taken_by", "error"},
		read:    lostAttempts,
	},
}

// inspectOrder is every query's name, in the order they are asked.
func inspectOrder() []string {
	var out []string
	for _, q := range runner.InspectQueries {
		out = append(out, q.Name)
		if q.Name == "stuck" {
			for _, h := range historyQueries {
				out = append(out, h.name)
			}
		}
	}
	for _, q := range tableQueries {
		out = append(out, q.name)
	}
	return out
}

// inspect asks the queries named (all when none) of db: the lab's
// runbook's through runner.Inspect, the history's through ns's
// schedule.RunReader, the queue's and the fence's through their packages
// on the tables of t, and returns their answers in inspectOrder.
func inspect(ctx context.Context, db *sql.DB, names []string, o runner.InspectOptions, ns string, t inspectTables) ([]runner.InspectAnswer, error) {
	asked := func(name string) bool { return len(names) == 0 || slices.Contains(names, name) }
	var labNames []string
	for _, q := range runner.InspectQueries {
		if asked(q.Name) {
			labNames = append(labNames, q.Name)
		}
	}
	byName := map[string]runner.InspectAnswer{}
	if len(labNames) > 0 {
		answers, err := runner.Inspect(ctx, db, labNames, o)
		if err != nil {
			return nil, err
		}
		for _, a := range answers {
			byName[a.Query.Name] = a
		}
	}
	reader, err := schedule.NewRunReader(ctx, db, &schedule.StoreConfig{Namespace: ns})
	if err != nil {
		return nil, err
	}
	for _, q := range historyQueries {
		if !asked(q.name) {
			continue
		}
		a := runner.InspectAnswer{Query: runner.InspectQuery{Name: q.name, Title: q.title, Table: q.table, Columns: q.columns}}
		ok, err := migrate.Exists(ctx, db, migrate.Postgres, q.table)
		switch {
		case err != nil:
			return nil, fmt.Errorf("query %s: %w", q.name, err)
		case !ok:
			a.Skipped = "no table " + q.table + " here"
		default:
			a.Columns = q.columns
			if a.Rows, err = q.read(ctx, reader, o.Limit); err != nil {
				return nil, fmt.Errorf("query %s: %w", q.name, err)
			}
		}
		byName[q.name] = a
	}
	for _, q := range tableQueries {
		if !asked(q.name) {
			continue
		}
		a := runner.InspectAnswer{Query: runner.InspectQuery{Name: q.name, Title: q.title, Columns: q.columns}}
		rows, skipped, err := q.read(ctx, db, t, o.Limit)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", q.name, err)
		}
		a.Rows, a.Skipped = rows, skipped
		if skipped == "" {
			a.Columns = q.columns
		}
		byName[q.name] = a
	}
	var out []runner.InspectAnswer
	for _, n := range inspectOrder() {
		if a, ok := byName[n]; ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// inspectTime prints a time as the lab's runbook answers do.
func inspectTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}

// missedTicks lists the latest missed ticks, the newest first.
func missedTicks(ctx context.Context, r *schedule.RunReader, limit int) ([][]string, error) {
	ms, err := r.Missed(ctx, "", limit)
	if err != nil {
		return nil, err
	}
	rows := make([][]string, 0, len(ms))
	for _, m := range ms {
		rows = append(rows, []string{m.Namespace, m.Job, inspectTime(m.Fire), string(m.Cause), m.Node, inspectTime(m.Recorded), oneLine(m.Detail, 120)})
	}
	return rows, nil
}

// attemptsScanned bounds the attempts lost reads: every attempt of the
// ticks that ran twice, the newest first.
const attemptsScanned = 1000

// lostAttempts lists the lost and refused attempts of the latest ticks
// that ran twice, each with the attempt that took its tick (the next one
// of the tick). It reads them by outcome, so that no number of later
// attempts of a frequent schedule hides them.
func lostAttempts(ctx context.Context, r *schedule.RunReader, limit int) ([][]string, error) {
	as, _, err := r.FindAttempts(ctx, schedule.AttemptFilter{Outcome: schedule.RanTwice, Limit: attemptsScanned})
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for i, a := range as {
		if a.Outcome != "lost" && a.Outcome != "refused" {
			continue
		}
		// A tick's attempts are read newest first: the one before this is
		// its successor, when it is of the same tick.
		takenBy := "-"
		if i > 0 && as[i-1].Job == a.Job && as[i-1].Fire.Equal(a.Fire) {
			s := as[i-1]
			takenBy = fmt.Sprintf("%s:%d (attempt %d, %s)", s.Node, s.Token, s.Attempt, s.Outcome)
		}
		rows = append(rows, []string{a.Namespace, a.Job, inspectTime(a.Fire), a.Node, strconv.FormatInt(int64(a.Token), 10),
			strconv.Itoa(a.Attempt), a.Outcome, inspectTime(a.Ended), takenBy, oneLine(a.Error, 120)})
		if len(rows) == limit {
			break
		}
	}
	return rows, nil
}

// inspectTables are the queue's and the fence's tables inspect reads
// (--queue-table, --fence-table).
type inspectTables struct{ queue, fence string }

// tableQuery is a question of the queue's or the fence's tables, asked
// last, through the package that owns them; skipped says why it was not
// asked (a missing table).
type tableQuery struct {
	name, title string
	columns     []string
	read        func(ctx context.Context, db *sql.DB, t inspectTables, limit int) (rows [][]string, skipped string, err error)
}

var tableQueries = []tableQuery{
	{
		name: "jobs", title: "the queue's jobs running past their lease: their worker paused or died, and no started client's reaper has reclaimed them yet, the longest past first",
		columns: []string{"queue", "id", "kind", "attempt", "token", "locked_by", "locked_until", "last_error"},
		read:    stuckJobs,
	},
	{
		name: "refused", title: "writes the fence refused, from its refusal log, the newest first",
		columns: []string{"resource", "token", "held", "lease_key", "node", "schedule", "at"},
		read:    refusedWrites,
	},
}

// stuckJobs lists the queue's running jobs past their lease.
func stuckJobs(ctx context.Context, db *sql.DB, t inspectTables, limit int) ([][]string, string, error) {
	in, err := queue.NewInspector(db, &queue.Config{Table: t.queue})
	if err != nil {
		return nil, "", err
	}
	missing, err := in.Missing(ctx)
	if err != nil || missing != "" {
		return nil, "no table " + missing + " here", err
	}
	js, err := in.Stuck(ctx, "", limit)
	if err != nil {
		return nil, "", err
	}
	rows := make([][]string, 0, len(js))
	for _, j := range js {
		rows = append(rows, []string{j.Queue, strconv.FormatInt(j.ID, 10), j.Kind, strconv.Itoa(j.Attempt), strconv.FormatInt(int64(j.Token), 10),
			j.LockedBy, inspectTime(j.LockedUntil), oneLine(j.LastError, 120)})
	}
	return rows, "", nil
}

// refusedWrites lists the fence's refusal log, the newest first.
func refusedWrites(ctx context.Context, db *sql.DB, t inspectTables, limit int) ([][]string, string, error) {
	f, err := fence.New(&fence.Config{Table: t.fence})
	if err != nil {
		return nil, "", err
	}
	ok, err := f.LogTable(ctx, db)
	if err != nil || !ok {
		return nil, "no table " + t.fence + "_refusal_log here", err
	}
	es, err := f.RefusalLog(ctx, db, nil, limit)
	if err != nil {
		return nil, "", err
	}
	rows := make([][]string, 0, len(es))
	for _, e := range es {
		rows = append(rows, []string{e.Resource, strconv.FormatInt(int64(e.Token), 10), strconv.FormatInt(int64(e.Held), 10),
			e.Key, e.Node, e.Schedule, inspectTime(e.At)})
	}
	return rows, "", nil
}
