package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/queue"
	"github.com/aegislab/aegis/schedule"
)

// Run-key mode on PostgreSQL, from an empty database: docs/schedule.md's
// usage (runKeyMode's body) until its first run has committed.
func ExampleNew_runKeyMode() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	fmt.Println(untilRun(ctx, pool, runKeyMode))
	// Output:
	// reconciled, with a run's token: true
	// <nil>
}

// runKeyMode is docs/schedule.md's run-key mode, as printed there.
func runKeyMode(ctx context.Context, pool *pgxpool.Pool) error {
	store, err := schedule.NewStoreFromPool(ctx, pool, nil) // creates the run table (numbered migrations); SQLite: schedule.NewStore(ctx, db, nil)
	if err != nil {
		return err
	}
	defer store.Close()                              // its bridge to database/sql; the pool stays yours
	if err := fence.Migrate(ctx, pool); err != nil { // the job's writes go through the fence
		return err
	}
	s, err := schedule.New(&schedule.Config{Node: "web-1", Store: store}) // run-key mode
	if err != nil {
		return err
	}
	err = s.Add(schedule.Job{
		Name:          "nightly-reconciliation", // ShedLock's @SchedulerLock name
		Cron:          "* * * * * *",            // seconds first: every second here; 02:00 in Berlin is "TZ=Europe/Berlin 0 0 2 * * *"
		LockAtMostFor: 30 * time.Minute,         // run row / lease TTL, kept alive while the job runs
		Run: func(ctx context.Context) error {
			token, _ := schedule.TokenFrom(ctx) // outside a run it is 0, which the fence refuses
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := fence.Check(ctx, tx, "nightly-reconciliation", token); err != nil {
					return err // aegis.ErrStale: a later run has written
				}
				return reconcile(ctx) // the job's writes, on tx
			})
		},
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Stop() // waits for a running job
	<-ctx.Done()   // until shutdown
	return nil
}

// Leader mode, from an empty database: docs/schedule.md's leader mode
// (leaderMode's body) until the first run a worker took from the queue.
func ExampleNew_leaderMode() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, drop, err := docsnippets.Postgres(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	fmt.Println(untilRun(ctx, pool, leaderMode))
	// Output:
	// reconciled, with a run's token: true
	// <nil>
}

// leaderMode is docs/schedule.md's leader mode, as printed there.
func leaderMode(ctx context.Context, pool *pgxpool.Pool) error {
	locker, err := pglease.New(pool, nil) // any aegis.Locker elects
	if err != nil {
		return err
	}
	election, err := elect.New(locker, "scheduler", &elect.Config{Node: "web-1", TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	s, err := schedule.New(&schedule.Config{Node: "web-1", Leader: &schedule.LeaderConfig{
		Election: election, Pool: pool, // Queue: "schedule", Table: "aegis_schedule_run" by default
		// QueueTable, FenceTable: the queue's and the fence's tables (queue.Config.Table, fence.Config.Table;
		// the workers' queue.Config.Table must be the same), the packages' defaults when empty
	}})
	if err != nil {
		return err
	}
	err = s.Add(schedule.Job{Name: "nightly-reconciliation", Cron: "* * * * * *", Run: reconcile}) // the same jobs on every replica
	if err != nil {
		return err
	}
	workers := queue.NewWorkers()
	if err := s.AddWorker(workers); err != nil { // this replica works runs (a replica may only enqueue, or only work)
		return err
	}
	if err := s.Start(ctx); err != nil { // first: creates the tables (the queue's too); campaigns; enqueues while it leads
		return err
	}
	defer s.Stop()
	qc, err := queue.New(pool, &queue.Config{Queues: map[string]queue.QueueConfig{"schedule": {MaxWorkers: 4}}, Workers: workers})
	if err != nil {
		return err
	}
	if err := qc.Start(ctx); err != nil { // workers compete: FOR UPDATE SKIP LOCKED
		return err
	}
	defer qc.Stop(context.WithoutCancel(ctx)) // graceful: waits for running jobs
	<-ctx.Done()                              // until shutdown
	return nil
}

// reconciled receives a line from the first reconcile.
var reconciled = make(chan string, 1)

// reconcile stands for the job: its writes carry the run's token (in
// leader mode too: token, _ := schedule.TokenFrom(ctx), then fence.Check).
func reconcile(ctx context.Context) error {
	token, ok := schedule.TokenFrom(ctx)
	select {
	case reconciled <- fmt.Sprint("reconciled, with a run's token: ", ok && token > 0):
	default: // a later tick
	}
	return nil
}

// untilRun runs mode until reconcile has run once, then shuts it down and
// returns what it returned; every wait is bounded by ctx.
func untilRun(ctx context.Context, pool *pgxpool.Pool, mode func(context.Context, *pgxpool.Pool) error) error {
	ctx, shutdown := context.WithCancel(ctx)
	defer shutdown()
	done := make(chan error, 1)
	go func() { done <- mode(ctx, pool) }()
	select {
	case line := <-reconciled:
		fmt.Println(line)
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no run within the example's bound: %w", ctx.Err())
	}
	shutdown()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the scheduler did not stop within 30s")
	}
}

// The catalog on PostgreSQL, from an empty database: docs/schedule.md's
// catalog (catalogMode's body) until the first run of the schedule it puts.
func ExampleCatalog() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, drop, err := docsnippets.Postgres(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	fmt.Println(untilRun(ctx, pool, catalogMode))
	// Output:
	// reconciled, with a run's token: true
	// <nil>
}

// catalogMode is docs/schedule.md's catalog, as printed there.
func catalogMode(ctx context.Context, pool *pgxpool.Pool) error {
	store, err := schedule.NewStoreFromPool(ctx, pool, nil) // the run table, on the pool your leases, fence and queue use
	if err != nil {
		return err
	}
	defer store.Close()                                         // its bridge to database/sql; the pool stays yours
	catalog, err := schedule.NewCatalogFromPool(ctx, pool, nil) // the schedules; &schedule.CatalogConfig{Namespace: "billing"} keeps a service's apart
	if err != nil {
		return err
	}
	defer catalog.Close()
	s, err := schedule.New(&schedule.Config{Node: "web-1", Store: store, Catalog: catalog})
	if err != nil {
		return err
	}
	// Handlers are code, registered by name on the replicas that run them.
	err = s.Handle("invoice-export", func(ctx context.Context, args json.RawMessage) error {
		var a struct{ Month string }
		if err := json.Unmarshal(args, &a); err != nil {
			return err
		}
		return reconcile(ctx) // its writes go through the fence with schedule.TokenFrom(ctx)
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil { // binds the catalog's schedules, and every change within a second
		return err
	}
	defer s.Stop()
	// Every replica seeds the catalog at start-up: created once, left at its
	// version when equal (catalog.Put or `aegis schedule put` edits it).
	_, err = catalog.Ensure(ctx, schedule.Entry{
		Name: "october-invoices", Every: time.Second, // or Cron: "0 0 2 * * *", TZ: "Europe/Berlin"
		Handler: "invoice-export", Args: json.RawMessage(`{"month": "2026-10"}`),
	})
	if err != nil {
		return err
	}
	<-ctx.Done() // until shutdown
	return nil
}
