// Command invoice runs the seed's invoice export (lesson 36) against a real
// PostgreSQL and prints the timeline: two schedulers race for the period,
// the winner pauses past the reaper's threshold, the reaper advances the
// token, the retry publishes the canonical PDF, and the first worker's late
// finish changes nothing.
//
//	go run ./examples/invoice [-postgres URL] [-objects DIR]
//
// It works in its own schema, aegis_invoice_demo, recreated on every run.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoice:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("invoice", flag.ContinueOnError)
	url := fs.String("postgres", cmp.Or(os.Getenv("AEGIS_POSTGRES_URL"), "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable"), "PostgreSQL URL (AEGIS_POSTGRES_URL)")
	objects := fs.String("objects", "", "directory of the object store (default: a temporary directory)")
	period := fs.String("period", "2026-10", "billing period")
	reapAfter := fs.Duration("reap-after", 300*time.Millisecond, "age after which the reaper reclaims a RUNNING export (10m in production)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *reapAfter <= 0 {
		return fmt.Errorf("-reap-after %s: must be positive", *reapAfter)
	}
	if *objects == "" {
		dir, err := os.MkdirTemp("", "aegis-invoice-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*objects = dir
	}
	store, err := fence.NewDir(*objects)
	if err != nil {
		return err
	}
	pool, err := connect(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()
	e := &Exports{DB: pool, Objects: store}
	if err := e.Migrate(ctx); err != nil {
		return err
	}
	return story(ctx, e, *period, *reapAfter, newTimeline(out))
}

// connect opens a pool on a freshly recreated demo schema.
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse the PostgreSQL URL: %w", err)
	}
	admin, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS aegis_invoice_demo CASCADE; CREATE SCHEMA aegis_invoice_demo"); err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s:%d: %w (start it with scripts/services start)", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "aegis_invoice_demo"
	return pgxpool.NewWithConfig(ctx, cfg)
}

// timeline prints events with the time since the story began.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func newTimeline(out io.Writer) *timeline { return &timeline{out: out, start: time.Now()} }

func (t *timeline) say(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := time.Since(t.start).Milliseconds()
	fmt.Fprintf(t.out, "%6dms  %-12s %s\n", ms, who, fmt.Sprintf(format, args...))
}

// story tells the export step by step: the race for the period, the
// winner's pause, the reclaim, the retry that publishes, the stale finish
// refused, the late comers refused, and the one object left.
func story(ctx context.Context, e *Exports, period string, reapAfter time.Duration, tl *timeline) error {
	tl.say("", "two schedulers wake at 02:00 for the %s export", period)

	// 1. Both schedulers insert the period; the primary key picks one.
	first, err := race(ctx, e, period, tl)
	if err != nil {
		return err
	}
	// 2. The winner renders and uploads under its token, then pauses.
	key1, err := uploadAndPause(ctx, e, period, first, reapAfter, tl)
	if err != nil {
		return err
	}
	// 3. The runbook sees it; the reaper reclaims it with a new token.
	second, err := reclaim(ctx, e, period, first, reapAfter, tl)
	if err != nil {
		return err
	}
	// 4. The retry runs under the new token and publishes.
	key2, err := retry(ctx, e, period, second, tl)
	if err != nil {
		return err
	}
	// 5. The first worker resumes and tries to finish with its old token.
	if err := staleFinish(ctx, e, period, first, key1, tl); err != nil {
		return err
	}
	// 6. A late reaper run and a late scheduler change nothing.
	if err := lateComers(ctx, e, period, tl); err != nil {
		return err
	}
	return oneObject(ctx, e, period, key2, tl)
}

// race has two schedulers insert the period at once and returns the
// winner's fencing token.
func race(ctx context.Context, e *Exports, period string, tl *timeline) (aegis.Token, error) {
	var (
		wg     sync.WaitGroup
		go1    = make(chan struct{})
		tokens [2]aegis.Token
		errs   [2]error
	)
	for i := range 2 {
		wg.Go(func() {
			<-go1
			tokens[i], errs[i] = e.Claim(ctx, period)
		})
	}
	close(go1)
	wg.Wait()
	winner := -1
	for i := range 2 {
		if errs[i] == nil {
			winner = i
		} else if !errors.Is(errs[i], ErrClaimed) {
			return 0, errs[i]
		}
	}
	if winner < 0 {
		return 0, errors.New("no scheduler won the period")
	}
	tl.say(fmt.Sprintf("scheduler-%d", winner+1), "INSERT period %s: won, fencing token %d", period, tokens[winner])
	tl.say(fmt.Sprintf("scheduler-%d", 2-winner), "INSERT period %s: unique violation, another scheduler owns it: stop", period)
	return tokens[winner], nil
}

// uploadAndPause is the winner's work under its token: it renders and
// uploads the PDF, then pauses past the reaper's threshold. It returns
// the upload's key.
func uploadAndPause(ctx context.Context, e *Exports, period string, first aegis.Token, reapAfter time.Duration, tl *timeline) (string, error) {
	key1, err := e.Upload(ctx, period, first, Render(period, first))
	if err != nil {
		return "", err
	}
	tl.say("worker-1", "rendered the PDF, uploaded %s", key1)
	tl.say("worker-1", "pauses before its finish (a GC pause, a SIGSTOP, a stalled disk) ...")
	time.Sleep(reapAfter + reapAfter/2)
	return key1, nil
}

// reclaim is the runbook's view of the stuck export and the reaper's
// reclaim, which returns the new fencing token.
func reclaim(ctx context.Context, e *Exports, period string, first aegis.Token, reapAfter time.Duration, tl *timeline) (aegis.Token, error) {
	stuck, err := e.Stuck(ctx, reapAfter)
	if err != nil {
		return 0, err
	}
	tl.say("runbook", "stuck RUNNING for more than %s: %v", reapAfter, stuck)
	second, ok, err := e.Reap(ctx, period, reapAfter)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errors.New("the reaper found nothing to reclaim")
	}
	tl.say("reaper", "reclaimed %s: fencing token %d -> %d in the same UPDATE", period, first, second)
	return second, nil
}

// retry renders, uploads and finishes under the new token, and returns
// the canonical object's key.
func retry(ctx context.Context, e *Exports, period string, second aegis.Token, tl *timeline) (string, error) {
	key2, err := e.Upload(ctx, period, second, Render(period, second))
	if err != nil {
		return "", err
	}
	tl.say("worker-2", "rendered the PDF, uploaded %s", key2)
	if err := e.Finish(ctx, period, second, key2); err != nil {
		return "", err
	}
	tl.say("worker-2", "finish WHERE fencing_token = %d: 1 row, FINISHED, canonical object %s", second, key2)
	return key2, nil
}

// staleFinish is the first worker's finish with its old token, which the
// fence must refuse.
func staleFinish(ctx context.Context, e *Exports, period string, first aegis.Token, key1 string, tl *timeline) error {
	err := e.Finish(ctx, period, first, key1)
	if !errors.Is(err, aegis.ErrStale) {
		return fmt.Errorf("the stale finish was not rejected: %v", err)
	}
	tl.say("worker-1", "resumes; finish WHERE fencing_token = %d: 0 rows (%v); deleted its upload", first, aegis.ErrStale)
	return nil
}

// lateComers are a late reaper run and a late scheduler, both refused.
func lateComers(ctx context.Context, e *Exports, period string, tl *timeline) error {
	if _, ok, err := e.Reap(ctx, period, 0); err != nil || ok {
		return fmt.Errorf("the reaper reclaimed a finished export: %v", err)
	}
	tl.say("reaper", "nothing to reclaim: the export is FINISHED")
	if _, err := e.Claim(ctx, period); !errors.Is(err, ErrClaimed) {
		return fmt.Errorf("a late scheduler was not refused: %v", err)
	}
	tl.say("scheduler-3", "a late scheduler's INSERT: unique violation: stop")
	return nil
}

// oneObject checks the result: the export FINISHED with key2, the one
// object in the store.
func oneObject(ctx context.Context, e *Exports, period, key2 string, tl *timeline) error {
	s, err := e.Get(ctx, period)
	if err != nil {
		return err
	}
	objects, err := e.Objects.List(ctx, "exports/"+period)
	if err != nil {
		return err
	}
	tl.say("", "result: status %s, token %d, object_key %s; objects in the store: %v", s.Status, s.Token, s.ObjectKey, objects)
	if s.Status != "FINISHED" || s.ObjectKey != key2 || len(objects) != 1 || objects[0] != key2 {
		return errors.New("the export did not end with exactly one canonical object")
	}
	tl.say("", "finance downloads one object")
	return nil
}
