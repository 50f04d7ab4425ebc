package alerts_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/alerts"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/queue"
)

// queueFaults are the alerts TestQueueAlerts's faults fire.
var queueFaults = map[string][]labels{
	"AegisQueueJobsWaiting": {{"queue": "idle", "kind": "report"}},
	"AegisQueueDeadJobs":    {{"queue": "default", "kind": "export"}},
}

type exportArgs struct {
	Fail bool `json:"fail"`
}

func (exportArgs) Kind() string { return "export" }

type reportArgs struct{}

func (reportArgs) Kind() string { return "report" }

// A queue on the real PostgreSQL produces what the queue's alerts watch:
// a job of kind export whose only attempt fails (a dead letter), and jobs
// of kind report due ten minutes ago in a queue no client works (idle) and
// in a paused one (held), which must not alert. The registry is scraped
// while the failing job runs and after it died. A queue whose jobs
// complete fires nothing.
func TestQueueAlerts(t *testing.T) {
	t.Parallel()
	faulty := faultyQueue(t)
	healthy := healthyQueue(t)
	// The gauges counted in the database are there at every scrape.
	atScrape := func(name string) bool {
		return slices.Contains([]string{"aegis_queue_jobs", "aegis_queue_jobs_by_kind", "aegis_queue_oldest_available_seconds", "aegis_queue_paused"}, name)
	}
	requireReadScraped(t, "aegis_queue_", atScrape, faulty...)
	require.NoError(t, alerts.Test(rulesPath,
		alerts.Case{Name: "faults", Scrapes: faulty, Fire: queueFaults},
		alerts.Case{Name: "healthy", Scrapes: healthy},
	))
}

func faultyQueue(t *testing.T) [][]alerts.Sample {
	ctx := t.Context()
	pool := queuePool(t)
	reg := prometheus.NewRegistry()
	running, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	ws := queue.NewWorkers()
	queue.AddWorker(ws, queue.WorkFunc[exportArgs](func(ctx context.Context, job *queue.Job[exportArgs]) error {
		if job.Args.Fail {
			close(running)
			wait(release)
			return errors.New("the export failed")
		}
		return nil
	}))
	c := startClient(t, pool, &queue.Config{Queues: map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 2}}, Workers: ws, Registerer: reg})
	producer := newProducer(t, pool)
	due := time.Now().Add(-10 * time.Minute)
	_, err := producer.EnqueueMany(ctx, []queue.EnqueueParams{
		{Args: reportArgs{}, Opts: &queue.EnqueueOpts{Queue: "idle", RunAt: due}},
		{Args: reportArgs{}, Opts: &queue.EnqueueOpts{Queue: "held", RunAt: due}},
	})
	require.NoError(t, err)
	require.NoError(t, producer.Pause(ctx, "held"))
	_, err = c.Enqueue(ctx, exportArgs{Fail: true}, &queue.EnqueueOpts{MaxAttempts: 1})
	require.NoError(t, err)
	testenv.Recv(t, running, 30*time.Second, "the failing export to run")
	before, err := alerts.Scrape(reg)
	require.NoError(t, err)

	release <- struct{}{}
	require.Eventually(t, func() bool {
		dead, err := c.DeadJobs(ctx, nil)
		return err == nil && len(dead) == 1
	}, 30*time.Second, 10*time.Millisecond, "waited 30s for the export's dead letter")
	after, err := alerts.Scrape(reg)
	require.NoError(t, err)
	return [][]alerts.Sample{before, after}
}

// healthyQueue scrapes a queue whose jobs complete, with a job due now in
// a queue no client works and one due in an hour.
func healthyQueue(t *testing.T) [][]alerts.Sample {
	ctx := t.Context()
	pool := queuePool(t)
	reg := prometheus.NewRegistry()
	ws := queue.NewWorkers()
	done := make(chan struct{}, 2)
	queue.AddWorker(ws, queue.WorkFunc[exportArgs](func(context.Context, *queue.Job[exportArgs]) error {
		done <- struct{}{}
		return nil
	}))
	c := startClient(t, pool, &queue.Config{Queues: map[string]queue.QueueConfig{queue.DefaultQueue: {MaxWorkers: 2}}, Workers: ws, Registerer: reg})
	producer := newProducer(t, pool)
	_, err := producer.EnqueueMany(ctx, []queue.EnqueueParams{
		{Args: reportArgs{}, Opts: &queue.EnqueueOpts{Queue: "idle"}},
		{Args: reportArgs{}, Opts: &queue.EnqueueOpts{Queue: "idle", Delay: time.Hour}},
	})
	require.NoError(t, err)
	var scrapes [][]alerts.Sample
	for range 2 {
		_, err := c.Enqueue(ctx, exportArgs{}, nil)
		require.NoError(t, err)
		testenv.Recv(t, done, 30*time.Second, "the export to run")
		s, err := alerts.Scrape(reg)
		require.NoError(t, err)
		scrapes = append(scrapes, s)
	}
	return scrapes
}

// queuePool is a pool on a schema of the test's own, with the queue's
// tables.
func queuePool(t *testing.T) *pgxpool.Pool {
	pool := testenv.Postgres(t)
	require.NoError(t, queue.Migrate(t.Context(), pool))
	return pool
}

// newProducer is a client that only enqueues, as another service would,
// any kind.
func newProducer(t *testing.T, pool *pgxpool.Pool) *queue.Client {
	c, err := queue.New(pool, &queue.Config{AllowUnknownKinds: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return c
}

// startClient starts a client that works cfg.Queues, stopped when the
// test ends.
func startClient(t *testing.T, pool *pgxpool.Pool, cfg *queue.Config) *queue.Client {
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := queue.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
	return c
}
