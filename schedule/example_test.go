package schedule_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// Run-key mode on SQLite: the job's context carries the run's token.
// Replicas share the database (PostgreSQL across hosts).
func Example() {
	dir, _ := os.MkdirTemp("", "schedule-example")
	defer os.RemoveAll(dir)
	db, _ := sqlitelease.Open(filepath.Join(dir, "runs.db"))
	defer db.Close()
	ctx := context.Background()
	store, err := schedule.NewStore(ctx, db, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	clock := schedule.NewManualClock(time.Date(2026, 10, 1, 1, 59, 0, 0, time.UTC))
	s, _ := schedule.New(&schedule.Config{Node: "web-1", Store: store, Clock: clock})
	ran := make(chan string, 1)
	err = s.Add(schedule.Job{
		Name: "invoice-export",
		Cron: "TZ=UTC 0 0 2 * * *", // 02:00:00 daily
		Run: func(ctx context.Context) error {
			run, _ := schedule.RunFrom(ctx)
			ran <- fmt.Sprintf("%s at %s, attempt %d, token from fire time: %v",
				run.Job, run.Fire.Format("15:04"), run.Attempt, run.Token > 0)
			return nil // writes go through the fence with schedule.TokenFrom(ctx)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = s.Start(ctx)
	defer s.Stop()
	// Wait (bounded) until the scheduler sleeps on the clock, then move it.
	for give := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, _ := clock.Waiters(); n > 0 {
			break
		}
		if time.Now().After(give) {
			fmt.Println("the scheduler never waited on its clock within 30s")
			return
		}
	}
	clock.Advance(time.Minute)
	select {
	case line := <-ran:
		fmt.Println(line)
	case <-time.After(30 * time.Second):
		fmt.Println("the tick did not run within 30s")
	}
	// Output: invoice-export at 02:00, attempt 1, token from fire time: true
}
