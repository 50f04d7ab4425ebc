package queue

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// The scrape counts the jobs per queue, kind and state in the database,
// the old per-queue series as their sum, the oldest available job's age
// per queue and kind, and which queues are paused.
func TestMetricsJobsByKindAtScrapeTime(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	running, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	c := client(t, p, &Config{
		Queues: map[string]QueueConfig{DefaultQueue: {MaxWorkers: 2}},
		Workers: workers(func(ctx context.Context, job *Job[testArgs]) error {
			switch job.Args.N {
			case 1:
				return errors.New("the export failed") // its only attempt: a dead letter
			case 2:
				running <- struct{}{}
				block(release, 30*time.Second)
			}
			return nil
		}),
		Registerer: reg,
	})
	_, err := c.EnqueueMany(ctx, []EnqueueParams{
		{Args: testArgs{N: 0}},
		{Args: testArgs{N: 1}, Opts: &EnqueueOpts{MaxAttempts: 1}},
		{Args: testArgs{N: 2}},
	})
	require.NoError(t, err)
	// Queue idle has no worker: a job due ten minutes ago waits there, and
	// one due in an hour (enqueued by a producer of another process).
	producer := client(t, p, &Config{AllowUnknownKinds: true})
	enqueued := time.Now()
	_, err = producer.EnqueueMany(ctx, []EnqueueParams{
		{Args: otherArgs{S: "late"}, Opts: &EnqueueOpts{Queue: "idle", RunAt: enqueued.Add(-10 * time.Minute)}},
		{Args: otherArgs{S: "later"}, Opts: &EnqueueOpts{Queue: "idle", Delay: time.Hour}},
	})
	require.NoError(t, err)
	require.NoError(t, c.Pause(ctx, "idle"))
	require.NoError(t, c.Start(ctx))
	testenv.Recv(t, running, 20*time.Second, "job 2 to run")
	eventually(t, "job 0 completed and job 1 dead", func() bool {
		// Job 2 alone is left (a job that ended has left the table; job 0
		// running still would count twice).
		return count(t, p, `SELECT count(*) FROM aegis_job WHERE queue = 'default'`) == 1 &&
			count(t, p, `SELECT count(*) FROM aegis_job_finished WHERE state = 'discarded'`) == 1
	})

	got := scrape(t, reg)
	age := got[`aegis_queue_oldest_available_seconds{kind="other",queue="idle"}`]
	// The due time is this machine's clock, the age the database's: the
	// same clock here, give or take a second.
	require.GreaterOrEqual(t, age, 600.0-1)
	require.Less(t, age, 600+1+time.Since(enqueued).Seconds())
	delete(got, `aegis_queue_oldest_available_seconds{kind="other",queue="idle"}`)
	require.Equal(t, map[string]float64{
		`aegis_queue_jobs_by_kind{kind="test",queue="default",state="available"}`: 0,
		`aegis_queue_jobs_by_kind{kind="test",queue="default",state="scheduled"}`: 0,
		`aegis_queue_jobs_by_kind{kind="test",queue="default",state="running"}`:   1,
		`aegis_queue_jobs_by_kind{kind="test",queue="default",state="dead"}`:      1,
		`aegis_queue_jobs_by_kind{kind="other",queue="idle",state="available"}`:   1,
		`aegis_queue_jobs_by_kind{kind="other",queue="idle",state="scheduled"}`:   1,
		`aegis_queue_jobs_by_kind{kind="other",queue="idle",state="running"}`:     0,
		`aegis_queue_jobs_by_kind{kind="other",queue="idle",state="dead"}`:        0,
		// The old series, as they were: no kind, no zeros.
		`aegis_queue_jobs{queue="default",state="running"}`: 1,
		`aegis_queue_jobs{queue="default",state="dead"}`:    1,
		`aegis_queue_jobs{queue="idle",state="available"}`:  1,
		`aegis_queue_jobs{queue="idle",state="scheduled"}`:  1,
		`aegis_queue_paused{queue="default"}`:               0,
		`aegis_queue_paused{queue="idle"}`:                  1,
	}, got)
}

// A scrape of a database without the queue's tables reports the error on
// each of its metrics, not empty gauges.
func TestMetricsScrapeWithoutTables(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(&depthCollector{pool: poolWithoutTables(t)}))
	_, err := reg.Gather()
	require.Error(t, err)
	for _, name := range []string{"aegis_queue_jobs", "aegis_queue_jobs_by_kind", "aegis_queue_oldest_available_seconds", "aegis_queue_paused"} {
		require.ErrorContains(t, err, fmt.Sprintf("fqName: %q", name))
	}
	require.ErrorContains(t, err, "queue: count jobs")
}

// scrape reads the gauges of the jobs, keyed by series, labels sorted.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "aegis_queue_jobs", "aegis_queue_jobs_by_kind", "aegis_queue_oldest_available_seconds", "aegis_queue_paused":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(ls)
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}
