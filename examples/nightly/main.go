// Command nightly is the seed's lab MID-032-LAB1: the orders service's
// nightly reconciliation job, run once across three replica processes.
//
//	go run ./examples/nightly [-postgres URL] [-fence=false]
//
// It starts three replicas of itself, each a scheduler in run-key mode on
// the same PostgreSQL. All three compute the same fire time; the one whose
// insert of (job, fire time) lands runs the job. Part-way through, the demo
// pauses that process for real (SIGSTOP) past its run's lease. Another
// replica's reaper reclaims the run with a greater token and finishes the
// reconciliation. Then the demo resumes the first (SIGCONT): its next write
// carries the old token and the fence refuses it (fence.CheckSQL), so no
// order is applied twice; the fence records the refusal itself (the
// refused token, the token it held, the replica and run that wrote it),
// with no call of the replica's. With -fence=false the same story applies
// an order twice.
//
// It works in its own schema, aegis_nightly_demo, recreated on every run and
// left in place at the end, and prints the command that opens the
// operator's console on it (the URL's password masked):
//
//	go run ./cmd/aegis console --store 'postgres://…?search_path=aegis_nightly_demo'
//
// whose Schedules page shows the run reclaimed with the greater token and
// whose Fence page shows the refused write with both tokens and its writer.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/schedule"
)

func main() {
	if os.Getenv("NIGHTLY_REPLICA") != "" {
		os.Exit(replicaMain())
	}
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nightly:", err)
		os.Exit(1)
	}
}

// result is what the demo found.
type result struct {
	Orders, Ledger, Duplicates int
	Stale                      bool // the resumed replica's write was rejected
	// Runner won the tick with RunnerToken and was paused; Reclaimer's
	// reaper took the run over with ReclaimToken.
	Runner, Reclaimer         string
	RunnerToken, ReclaimToken int64
	// Console is the command that opens aegis console on the demo's
	// schema, the URL's password masked.
	Console string
	// Attempts is the tick's attempt history, newest first.
	Attempts []schedule.Attempt
}

func run(ctx context.Context, args []string, out io.Writer) error {
	_, err := demo(ctx, args, out)
	return err
}

// demo tells the story: the demo's schema and tables, three replica
// processes started and told the night's fire time, the run followed
// (the runner paused past its lease, the reclaim, the runner resumed),
// and what the tables say at the end.
func demo(ctx context.Context, args []string, out io.Writer) (*result, error) {
	o, err := parseOptions(args)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, o.pgURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL (start it with scripts/services start): %w", err)
	}
	defer conn.Close(ctx)
	replicaURL, err := prepare(ctx, conn, o)
	if err != nil {
		return nil, err
	}

	tl := &timeline{out: out, start: time.Now()}
	tl.say("demo", "10 orders pending; 3 replicas start (fence=%v)", o.fenced)
	reps := newReplicas()
	defer reps.stop()
	if err := reps.start(ctx, replicaURL, o); err != nil {
		return nil, err
	}
	if err := reps.awaitReady(ctx, tl); err != nil {
		return nil, err
	}
	if err := reps.scheduleNightly(tl); err != nil {
		return nil, err
	}
	res, err := follow(ctx, reps, tl)
	if err != nil {
		return nil, err
	}
	if err := tally(ctx, conn, tl, res); err != nil {
		return nil, err
	}
	if res.Attempts, err = attempts(ctx, replicaURL, tl); err != nil {
		return nil, err
	}
	res.Console = consoleCommand(replicaURL)
	printConsole(out, res.Console, replicaURL)
	return res, nil
}

// options are the demo's flags.
type options struct {
	pgURL, schema string
	fenced        bool
	work          time.Duration
}

// parseOptions parses the demo's flags.
func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("nightly", flag.ContinueOnError)
	pgURL := fs.String("postgres", cmp.Or(os.Getenv("AEGIS_POSTGRES_URL"), "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable"), "PostgreSQL URL (AEGIS_POSTGRES_URL)")
	schema := fs.String("schema", "aegis_nightly_demo", "schema to recreate and work in; empty: the URL's own search_path, which must be empty of the demo's tables")
	fenced := fs.Bool("fence", true, "fence every write with the run's token")
	work := fs.Duration("work", 150*time.Millisecond, "time to reconcile one order")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if *work <= 0 {
		return options{}, fmt.Errorf("-work %s: must be positive", *work)
	}
	return options{pgURL: *pgURL, schema: *schema, fenced: *fenced, work: *work}, nil
}

// prepare recreates the demo's schema with its orders tables and the
// fence's, and returns the URL the replicas connect with: o.pgURL, working
// in the schema.
func prepare(ctx context.Context, conn *pgx.Conn, o options) (string, error) {
	replicaURL := o.pgURL
	if o.schema != "" {
		ident := pgx.Identifier{o.schema}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident+"; SET search_path = "+ident); err != nil {
			return "", err
		}
		u, err := url.Parse(o.pgURL)
		if err != nil {
			return "", fmt.Errorf("-postgres is not a URL: %w", err)
		}
		// A runtime parameter of the connection: pgx sends it at startup,
		// so every connection of the replicas' pools, and of the console
		// opened on the same URL, works in the schema.
		q := u.Query()
		q.Set("search_path", o.schema)
		u.RawQuery = q.Encode()
		replicaURL = u.String()
	}
	if _, err := conn.Exec(ctx, schemaSQL); err != nil {
		return "", fmt.Errorf("create the orders tables: %w", err)
	}
	// The fence's tables, where it records the writes it refused
	// (aegis_fence_refusal_log, aegis_fence_refusal): what aegis console's
	// Fence page reads. Created
	// once here, before the replicas start, as a deployment's migration
	// would.
	if err := migrateFence(ctx, replicaURL); err != nil {
		return "", err
	}
	return replicaURL, nil
}

// follow follows the story: pause the runner after it applied three
// orders, resume it once another replica has applied orders with a
// greater token, and finish when the reconciliation is complete.
func follow(ctx context.Context, reps *replicas, tl *timeline) (*result, error) {
	s := &story{tl: tl, reps: reps, applied: map[int]bool{}}
	deadline := time.After(60 * time.Second)
	for {
		var l line
		select {
		case l = <-reps.events:
		case <-deadline:
			return nil, errors.New("the story did not finish within 60s")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := s.tell(l); err != nil {
			return nil, err
		}
		done, err := s.direct(l)
		if err != nil {
			return nil, err
		}
		if done {
			return &s.res, nil
		}
	}
}

// story is what follow has seen so far.
type story struct {
	tl       *timeline
	reps     *replicas
	res      result
	holder   string
	holderTk int64
	paused   bool
	resumed  bool
	applied  map[int]bool
	// overtaken: another replica applied an order with a greater
	// token than the runner's.
	overtaken bool
}

// tell puts a replica's event on the timeline and notes the runner, the
// reclaimer, the orders applied and a refused write. A replica's error
// ends the story.
func (s *story) tell(l line) error {
	tl, res := s.tl, &s.res
	switch l.Kind {
	case "error":
		return fmt.Errorf("%s: %s", l.Node, l.Text)
	case "run":
		if l.Attempt > 1 {
			tl.say(l.Node, "runs the tick %s again, token %d, attempt %d", l.Fire, l.Token, l.Attempt)
		} else {
			tl.say(l.Node, "won the tick %s: its INSERT of (job, fire time) landed, token %d", l.Fire, l.Token)
		}
		if s.holder == "" {
			s.holder, s.holderTk = l.Node, l.Token
			res.Runner, res.RunnerToken = s.holder, s.holderTk
		}
	case "skipped":
		tl.say(l.Node, "tick %s: %s", l.Fire, l.Text)
	case "reclaim":
		tl.say(l.Node, "reaper: the run of %s expired; reclaimed it in one UPDATE, token %d, attempt %d", l.Fire, l.Token, l.Attempt)
		if res.Reclaimer == "" {
			res.Reclaimer, res.ReclaimToken = l.Node, l.Token
		}
	case "pending":
		tl.say(l.Node, "reads pending orders %s (token %d)", l.Text, l.Token)
	case "applied":
		tl.say(l.Node, "applied order %d with token %d", l.Order, l.Token)
		s.applied[l.Order] = true
	case "stale":
		tl.say(l.Node, "order %d with token %d: refused by the fence, which holds token %s: rolled back, stops", l.Order, l.Token, l.Text)
		res.Stale = true
	case "recorded":
		tl.say(l.Node, "the fence recorded the refusal: %s", l.Text)
	case "lost", "done":
		tl.say(l.Node, "%s %s (token %d) %s", l.Kind, l.Fire, l.Token, l.Text)
	}
	return nil
}

// direct acts on an event: it pauses the runner (SIGSTOP) once it applied
// three orders, and resumes it (SIGCONT) once another replica overtook it
// and every order is applied. It reports true when the resumed runner's
// run ended: the end of the story.
func (s *story) direct(l line) (bool, error) {
	tl, holder := s.tl, s.holder
	if l.Kind == "applied" && l.Node == holder && !s.paused && len(s.applied) >= 3 {
		tl.say("demo", "SIGSTOP %s (pid %d): paused past its run's lease (LockAtMostFor 1s)", holder, s.reps.byName[holder].Process.Pid)
		if err := s.reps.byName[holder].Process.Signal(syscall.SIGSTOP); err != nil {
			return false, err
		}
		s.paused = true
	}
	if l.Kind == "applied" && holder != "" && l.Node != holder && l.Token > s.holderTk {
		s.overtaken = true
	}
	// Checked on every event, the pause's included: on a loaded
	// machine the reaper can overtake the runner, and apply the last
	// order, before the pause.
	if s.paused && !s.resumed && s.overtaken && len(s.applied) == 10 {
		tl.say("demo", "SIGCONT %s: it resumes where it stopped, with its old token %d", holder, s.holderTk)
		if err := s.reps.byName[holder].Process.Signal(syscall.SIGCONT); err != nil {
			return false, err
		}
		s.resumed = true
	}
	// Its run's end, once its outcome is on record: the attempt history
	// says refused, the tick ran twice.
	if s.resumed && l.Node == holder && l.Kind == "done" {
		return true, nil
	}
	if !s.paused && l.Node == holder && (l.Kind == "done" || l.Kind == "lost") {
		// Its run was reclaimed before the pause: its heartbeats did
		// not reach the database within the 1s lease.
		return false, fmt.Errorf("%s lost its run before the demo paused it (%s): the machine is too loaded for the story's 1s lease; run it again", holder, l.Text)
	}
	return false, nil
}

// tally reads the outcome from the tables into res and says it: orders
// reconciled, ledger rows, orders applied twice, run rows.
func tally(ctx context.Context, conn *pgx.Conn, tl *timeline, res *result) error {
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE reconciled), (SELECT count(*) FROM ledger),
		(SELECT count(*) FROM (SELECT order_id FROM ledger GROUP BY order_id HAVING count(*) > 1) d) FROM orders`).
		Scan(&res.Orders, &res.Ledger, &res.Duplicates); err != nil {
		return err
	}
	var runs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM aegis_schedule_run`).Scan(&runs); err != nil {
		return err
	}
	tl.say("demo", "result: %d of 10 orders reconciled, %d ledger rows, %d orders applied twice; %d run row for the tick", res.Orders, res.Ledger, res.Duplicates, runs)
	if res.Duplicates == 0 {
		tl.say("demo", "no change was applied twice: every write carried its token and the update rejected the lower one")
	} else {
		tl.say("demo", "without the fence, the resumed replica applied an order a second time")
	}
	return nil
}

// attempts reads the tick's attempt history through package schedule,
// and says it: the paused runner's attempt, taken over (lost) and refused
// when it ended, and the reclaimer's.
func attempts(ctx context.Context, replicaURL string, tl *timeline) ([]schedule.Attempt, error) {
	cfg, err := pgx.ParseConfig(replicaURL)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	reader, err := schedule.NewRunReader(ctx, db, nil)
	if err != nil {
		return nil, err
	}
	as, err := reader.Attempts(ctx, "nightly-reconciliation", 10)
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		text := a.Outcome
		if a.Error != "" {
			text += ": " + a.Error
		}
		tl.say("demo", "attempt %d of the tick on %s, token %d: %s", a.Attempt, a.Node, a.Token, text)
	}
	return as, nil
}

// printConsole prints command, which opens the operator's console on the
// demo's tables, and how to use it when replicaURL's password was masked.
func printConsole(out io.Writer, command, replicaURL string) {
	fmt.Fprintf(out, "\nThe tables stay until the next run. To see the runs, their tokens and the refused write in the operator's console:\n\n  %s\n", command)
	if masked(replicaURL) {
		fmt.Fprintln(out, "\n(the password is masked: put it in place of xxxxx, or leave it out of the URL and set PGPASSWORD)")
	}
}

// migrateFence creates the fence's tables in the demo's schema.
func migrateFence(ctx context.Context, pgURL string) error {
	cfg, err := pgx.ParseConfig(pgURL)
	if err != nil {
		return fmt.Errorf("-postgres: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := fence.MigrateSQL(ctx, db); err != nil {
		return fmt.Errorf("create the fence tables: %w", err)
	}
	return nil
}

// consoleCommand is the command that opens aegis console on pgURL's
// database and schema. The password, in the URL's user information or in
// its password parameter, is masked: the output of a demo is pasted into
// chats and tickets. A connection string that is not a URL is not printed
// at all (it may carry password=…).
func consoleCommand(pgURL string) string {
	u, err := url.Parse(pgURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "go run ./cmd/aegis console --store URL   # URL: this database's postgres:// URL, with search_path set to the demo's schema"
	}
	u = maskedURL(u)
	return "go run ./cmd/aegis console --store '" + strings.ReplaceAll(u.String(), "'", `'\''`) + "'"
}

// maskedURL is u with any password replaced by xxxxx.
func maskedURL(u *url.URL) *url.URL {
	c := *u
	if c.User != nil {
		if _, ok := c.User.Password(); ok {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	q := c.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		c.RawQuery = q.Encode()
	}
	return &c
}

// masked reports whether consoleCommand masked a password of pgURL.
func masked(pgURL string) bool {
	u, err := url.Parse(pgURL)
	if err != nil {
		return false
	}
	_, inUser := u.User.Password()
	return inUser || u.Query().Has("password")
}

// timeline prints events with the time since the demo began.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (t *timeline) say(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%6dms  %-10s %s\n", time.Since(t.start).Milliseconds(), who, fmt.Sprintf(format, args...))
}
