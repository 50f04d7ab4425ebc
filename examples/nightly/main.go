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
// (UPDATE … WHERE last_token <= $t), so no order is applied twice. With
// -fence=false the same story applies an order twice.
//
// It works in its own schema, aegis_nightly_demo, recreated on every run.
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
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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
		q := u.Query()
		q.Set("options", "-csearch_path="+*schema)
		u.RawQuery = q.Encode()
		replicaURL = u.String()
	}
	if _, err := conn.Exec(ctx, schemaSQL); err != nil {
		return nil, fmt.Errorf("create the orders tables: %w", err)
	}

	tl := &timeline{out: out, start: time.Now()}
	// Nightly at this time of day (UTC), 2s from now: every replica
	// computes the same instant from the offset.
	fire := time.Now().Add(2 * time.Second).Truncate(time.Second)
	offset := fire.Sub(fire.Truncate(24 * time.Hour))
	tl.say("demo", "10 orders pending; nightly-reconciliation runs daily at %s UTC, next at %s; 3 replicas start (fence=%v)", fire.UTC().Format("15:04:05"), fire.UTC().Format(time.RFC3339), *fenced)

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
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("replica-%d", i)
		cmd := exec.CommandContext(ctx, self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "NIGHTLY_REPLICA="+name, "NIGHTLY_POSTGRES="+replicaURL,
			"NIGHTLY_OFFSET="+offset.String(), "NIGHTLY_WORK="+work.String(), "NIGHTLY_FENCE="+strconv.FormatBool(*fenced))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		reps = append(reps, cmd)
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
		deadline = time.After(60 * time.Second)
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
		case "ready":
			tl.say(l.Node, "started (pid %s)", l.Text)
		case "run":
			if l.Attempt > 1 {
				tl.say(l.Node, "runs the tick %s again, token %d, attempt %d", l.Fire, l.Token, l.Attempt)
			} else {
				tl.say(l.Node, "won the tick %s: its INSERT of (job, fire time) landed, token %d", l.Fire, l.Token)
			}
			if holder == "" {
				holder, holderTk = l.Node, l.Token
			}
		case "skipped":
			tl.say(l.Node, "tick %s: %s", l.Fire, l.Text)
		case "reclaim":
			tl.say(l.Node, "reaper: the run of %s expired; reclaimed it in one UPDATE, token %d, attempt %d", l.Fire, l.Token, l.Attempt)
		case "pending":
			tl.say(l.Node, "reads pending orders %s (token %d)", l.Text, l.Token)
		case "applied":
			tl.say(l.Node, "applied order %d with token %d", l.Order, l.Token)
			applied[l.Order] = true
		case "stale":
			tl.say(l.Node, "order %d with token %d: UPDATE … WHERE last_token <= $t hit 0 rows: stale, rolled back, stops", l.Order, l.Token)
			res.Stale = true
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
		if paused && !resumed && l.Kind == "applied" && l.Node != holder && l.Token > holderTk && len(applied) == 10 {
			tl.say("demo", "SIGCONT %s: it resumes where it stopped, with its old token %d", holder, holderTk)
			if err := pids[holder].Process.Signal(syscall.SIGCONT); err != nil {
				return nil, err
			}
			resumed = true
		}
		if resumed && l.Node == holder && (l.Kind == "done" || l.Kind == "lost") {
			break
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
	return &res, nil
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
