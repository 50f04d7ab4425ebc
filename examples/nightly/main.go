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
// carries the old token and the update rejects it
// (UPDATE … WHERE last_token <= $t), so no order is applied twice; the
// replica counts the refusal in the fence's refusal table
// (fence.CountRefusalSQL). With -fence=false the same story applies an
// order twice.
//
// It works in its own schema, aegis_nightly_demo, recreated on every run and
// left in place at the end, and prints the command that opens the
// operator's console on it (the URL's password masked):
//
//	go run ./cmd/aegis console --store 'postgres://…?search_path=aegis_nightly_demo'
//
// whose Schedules page shows the run reclaimed with the greater token and
// whose Fence page shows the refused write with both tokens.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis/fence"
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
}

func run(ctx context.Context, args []string, out io.Writer) error {
	_, err := demo(ctx, args, out)
	return err
}

func demo(ctx context.Context, args []string, out io.Writer) (*result, error) {
	fs := flag.NewFlagSet("nightly", flag.ContinueOnError)
	pgURL := fs.String("postgres", cmp.Or(os.Getenv("AEGIS_POSTGRES_URL"), "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable"), "PostgreSQL URL (AEGIS_POSTGRES_URL)")
	schema := fs.String("schema", "aegis_nightly_demo", "schema to recreate and work in; empty: the URL's own search_path, which must be empty of the demo's tables")
	fenced := fs.Bool("fence", true, "fence every write with the run's token")
	work := fs.Duration("work", 150*time.Millisecond, "time to reconcile one order")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *work <= 0 {
		return nil, fmt.Errorf("-work %s: must be positive", *work)
	}
	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL (start it with scripts/services start): %w", err)
	}
	defer conn.Close(ctx)
	replicaURL := *pgURL
	if *schema != "" {
		ident := pgx.Identifier{*schema}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident+"; SET search_path = "+ident); err != nil {
			return nil, err
		}
		u, err := url.Parse(*pgURL)
		if err != nil {
			return nil, fmt.Errorf("-postgres is not a URL: %w", err)
		}
		// A runtime parameter of the connection: pgx sends it at startup,
		// so every connection of the replicas' pools, and of the console
		// opened on the same URL, works in the schema.
		q := u.Query()
		q.Set("search_path", *schema)
		u.RawQuery = q.Encode()
		replicaURL = u.String()
	}
	if _, err := conn.Exec(ctx, schemaSQL); err != nil {
		return nil, fmt.Errorf("create the orders tables: %w", err)
	}
	// The fence's tables, where the replicas count the writes it refused
	// (aegis_fence_refusal): what aegis console's Fence page reads. Created
	// once here, before the replicas start, as a deployment's migration
	// would.
	if err := migrateFence(ctx, replicaURL); err != nil {
		return nil, err
	}

	tl := &timeline{out: out, start: time.Now()}
	tl.say("demo", "10 orders pending; 3 replicas start (fence=%v)", *fenced)

	events := make(chan line, 256)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var reps []*exec.Cmd
	var readers sync.WaitGroup
	defer func() {
		for _, c := range reps {
			_ = c.Process.Signal(syscall.SIGCONT)
			_ = c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range reps {
			done := make(chan struct{})
			go func() { _ = c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = c.Process.Kill()
				<-done
			}
		}
		readers.Wait()
	}()
	pids := map[string]*exec.Cmd{}
	var stdins []io.WriteCloser
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("replica-%d", i)
		cmd := exec.CommandContext(ctx, self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "NIGHTLY_REPLICA="+name, "NIGHTLY_POSTGRES="+replicaURL,
			"NIGHTLY_WORK="+work.String(), "NIGHTLY_FENCE="+strconv.FormatBool(*fenced))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		reps = append(reps, cmd)
		stdins = append(stdins, stdin)
		pids[name] = cmd
		readers.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var l line
				if json.Unmarshal(sc.Bytes(), &l) == nil {
					events <- l
				}
			}
		})
	}

	// The fire time is set once every replica is connected and has its
	// scheduler's store: set before, a replica slow to start (a cold
	// machine) would bind the job after the fire time and skip the
	// night, and with all three the story would never begin.
	ready := 0
	startBy := time.After(60 * time.Second)
	for ready < len(reps) {
		select {
		case l := <-events:
			switch l.Kind {
			case "error":
				return nil, fmt.Errorf("%s: %s", l.Node, l.Text)
			case "ready":
				tl.say(l.Node, "started (pid %s)", l.Text)
				ready++
			}
		case <-startBy:
			return nil, fmt.Errorf("only %d of the 3 replicas were ready within 60s", ready)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Nightly at this time of day (UTC), on the next whole second at
	// least a second from now: every replica computes the same instant
	// from the offset.
	fire := time.Now().Add(2 * time.Second).Truncate(time.Second)
	offset := fire.Sub(fire.Truncate(24 * time.Hour))
	tl.say("demo", "nightly-reconciliation runs daily at %s UTC, next at %s", fire.UTC().Format("15:04:05"), fire.UTC().Format(time.RFC3339))
	for _, w := range stdins {
		if _, err := fmt.Fprintln(w, offset); err != nil {
			return nil, fmt.Errorf("tell a replica the schedule: %w", err)
		}
	}

	// Follow the story: pause the runner after it applied three orders,
	// resume it once another replica has applied orders with a greater
	// token, and finish when the reconciliation is complete.
	var (
		res      result
		holder   string
		holderTk int64
		paused   bool
		resumed  bool
		applied  = map[int]bool{}
		// overtaken: another replica applied an order with a greater
		// token than the runner's.
		overtaken bool
		deadline  = time.After(60 * time.Second)
	)
	for {
		var l line
		select {
		case l = <-events:
		case <-deadline:
			return nil, errors.New("the story did not finish within 60s")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		switch l.Kind {
		case "error":
			return nil, fmt.Errorf("%s: %s", l.Node, l.Text)
		case "run":
			if l.Attempt > 1 {
				tl.say(l.Node, "runs the tick %s again, token %d, attempt %d", l.Fire, l.Token, l.Attempt)
			} else {
				tl.say(l.Node, "won the tick %s: its INSERT of (job, fire time) landed, token %d", l.Fire, l.Token)
			}
			if holder == "" {
				holder, holderTk = l.Node, l.Token
				res.Runner, res.RunnerToken = holder, holderTk
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
			applied[l.Order] = true
		case "stale":
			tl.say(l.Node, "order %d with token %d: UPDATE … WHERE last_token <= $t hit 0 rows: stale, rolled back, stops", l.Order, l.Token)
			res.Stale = true
		case "counted":
			tl.say(l.Node, "counted the refusal in aegis_fence_refusal: %s", l.Text)
		case "lost", "done":
			tl.say(l.Node, "%s %s (token %d) %s", l.Kind, l.Fire, l.Token, l.Text)
		}
		if l.Kind == "applied" && l.Node == holder && !paused && len(applied) >= 3 {
			tl.say("demo", "SIGSTOP %s (pid %d): paused past its run's lease (LockAtMostFor 1s)", holder, pids[holder].Process.Pid)
			if err := pids[holder].Process.Signal(syscall.SIGSTOP); err != nil {
				return nil, err
			}
			paused = true
		}
		if l.Kind == "applied" && holder != "" && l.Node != holder && l.Token > holderTk {
			overtaken = true
		}
		// Checked on every event, the pause's included: on a loaded
		// machine the reaper can overtake the runner, and apply the last
		// order, before the pause.
		if paused && !resumed && overtaken && len(applied) == 10 {
			tl.say("demo", "SIGCONT %s: it resumes where it stopped, with its old token %d", holder, holderTk)
			if err := pids[holder].Process.Signal(syscall.SIGCONT); err != nil {
				return nil, err
			}
			resumed = true
		}
		if resumed && l.Node == holder && (l.Kind == "done" || l.Kind == "lost") {
			break
		}
		if !paused && l.Node == holder && (l.Kind == "done" || l.Kind == "lost") {
			// Its run was reclaimed before the pause: its heartbeats did
			// not reach the database within the 1s lease.
			return nil, fmt.Errorf("%s lost its run before the demo paused it (%s): the machine is too loaded for the story's 1s lease; run it again", holder, l.Text)
		}
	}

	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE reconciled), (SELECT count(*) FROM ledger),
		(SELECT count(*) FROM (SELECT order_id FROM ledger GROUP BY order_id HAVING count(*) > 1) d) FROM orders`).
		Scan(&res.Orders, &res.Ledger, &res.Duplicates); err != nil {
		return nil, err
	}
	var runs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM aegis_schedule_run`).Scan(&runs); err != nil {
		return nil, err
	}
	tl.say("demo", "result: %d of 10 orders reconciled, %d ledger rows, %d orders applied twice; %d run row for the tick", res.Orders, res.Ledger, res.Duplicates, runs)
	if res.Duplicates == 0 {
		tl.say("demo", "no change was applied twice: every write carried its token and the update rejected the lower one")
	} else {
		tl.say("demo", "without the fence, the resumed replica applied an order a second time")
	}
	res.Console = consoleCommand(replicaURL)
	fmt.Fprintf(out, "\nThe tables stay until the next run. To see the runs, their tokens and the refused write in the operator's console:\n\n  %s\n", res.Console)
	if masked(replicaURL) {
		fmt.Fprintln(out, "\n(the password is masked: put it in place of xxxxx, or leave it out of the URL and set PGPASSWORD)")
	}
	return &res, nil
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
