package console_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/queue"
)

// Two services share a database and a schema with a queue table and a
// fence table each (billing's of its own, the other's the defaults): a
// console given billing's tables shows billing's queues, jobs, resources
// and refusals and none of the other's, and a console of the defaults the
// other way round.
func TestPagesReadTheConfiguredTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, db := pgLeases(t)

	billingQueue, err := queue.New(pool, &queue.Config{Table: "billing_job", Logger: quietLog()})
	require.NoError(t, err)
	require.NoError(t, billingQueue.Migrate(ctx))
	require.NoError(t, queue.Migrate(ctx, pool))
	defaultQueue, err := queue.New(pool, &queue.Config{Logger: quietLog()})
	require.NoError(t, err)
	// Ids are per table: billing's start at 1001, so that each console is
	// asked an id only the other has.
	_, err = pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('billing_job', 'id'), 1000)`)
	require.NoError(t, err)
	billed, err := billingQueue.Enqueue(ctx, mailArgs{To: "billing@example.com"}, &queue.EnqueueOpts{Queue: "invoices"})
	require.NoError(t, err)
	other, err := defaultQueue.Enqueue(ctx, mailArgs{To: "other@example.com"}, &queue.EnqueueOpts{Queue: "newsletters"})
	require.NoError(t, err)

	billingFence, err := fence.New(&fence.Config{Table: "billing_fence"})
	require.NoError(t, err)
	require.NoError(t, billingFence.Migrate(ctx, pool))
	require.NoError(t, fence.Migrate(ctx, pool))
	check := func(f func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, f) }
	require.NoError(t, check(func(tx pgx.Tx) error { return billingFence.Check(ctx, tx, "ledger/billing", 5) }))
	require.ErrorIs(t, check(func(tx pgx.Tx) error { return billingFence.Check(ctx, tx, "ledger/billing", 4) }), aegis.ErrStale)
	require.NoError(t, check(func(tx pgx.Tx) error { return fence.Check(ctx, tx, "ledger/other", 9) }))

	c := client(t)
	for _, tc := range []struct {
		name         string
		cfg          console.Config
		queue, notQ  string
		job, notJob  int64
		res, notRes  string
		refusalShown bool
	}{
		{"billing", console.Config{QueueTable: "billing_job", FenceTable: "billing_fence"}, "invoices", "newsletters", billed.Job.ID, other.Job.ID, "ledger/billing", "ledger/other", true},
		{"default", console.Config{}, "newsletters", "invoices", other.Job.ID, billed.Job.ID, "ledger/other", "ledger/billing", false},
	} {
		tc.cfg.DB = db
		ts := serve(t, &tc.cfg)
		code, body := get(t, c, ts.URL+"/queue")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, tc.queue, tc.name)
		require.NotContains(t, body, tc.notQ, tc.name)
		code, body = get(t, c, ts.URL+"/queue/jobs/"+strconv.FormatInt(tc.job, 10))
		require.Equal(t, http.StatusOK, code, "%s: its job: %s", tc.name, body)
		require.Contains(t, body, tc.queue, tc.name)
		code, body = get(t, c, ts.URL+"/queue/jobs/"+strconv.FormatInt(tc.notJob, 10))
		require.Equal(t, http.StatusNotFound, code, "%s: the other's job: %s", tc.name, body)
		code, body = get(t, c, ts.URL+"/fence")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `data-resource="`+tc.res+`"`, tc.name)
		require.NotContains(t, body, tc.notRes, tc.name)
		if tc.refusalShown {
			refusalRow(t, body, tc.res, 4, 5)
		} else {
			require.NotContains(t, body, `data-token="4"`, "%s: billing's refusal", tc.name)
		}
	}

	_, err = console.New(ctx, &console.Config{DB: db, Addr: "127.0.0.1:0", QueueTable: "bad-name"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "Config.QueueTable")
	_, err = console.New(ctx, &console.Config{DB: db, Addr: "127.0.0.1:0", FenceTable: "a.b.c"})
	require.ErrorIs(t, err, aegis.ErrInvalid)
	require.ErrorContains(t, err, "Config.FenceTable")

	// A table the database does not have is named on its page.
	ts := serve(t, &console.Config{DB: db, QueueTable: "nope_job", FenceTable: "nope_fence"})
	_, body := get(t, c, ts.URL+"/queue")
	require.Contains(t, body, "nope_job")
	_, body = get(t, c, ts.URL+"/fence")
	require.Contains(t, body, "nope_fence")
}
