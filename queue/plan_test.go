package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestPlansIgnoreStaleStatistics: a queue table is often empty when VACUUM
// samples it, and full a second later. With the statistics of the empty
// table (reltuples 0) and 20,000 jobs in it, each hot statement must still
// reach its rows through the primary key: it reads about as many rows of
// aegis_job as it changes, not the whole table (a hash join or a rescanning
// nested loop would read 20,000 per statement, or 2,000,000).
func TestPlansIgnoreStaleStatistics(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	c := client(t, p, nil)
	enqueue := func(n int) {
		params := make([]EnqueueParams, n)
		for i := range params {
			params[i] = EnqueueParams{Args: testArgs{N: i}}
		}
		_, err := c.EnqueueMany(ctx, params)
		require.NoError(t, err)
	}
	w := worker("W", time.Minute, false)
	enqueue(5000)
	for {
		jobs, err := w.claim(ctx, p, DefaultQueue, 1000, "test-claim")
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		ids, tokens := claims(jobs)
		_, err = w.completeBatch(ctx, p, ids, tokens)
		require.NoError(t, err)
	}
	_, err := p.Exec(ctx, "VACUUM (TRUNCATE false) aegis_job")
	require.NoError(t, err)
	enqueue(20000)
	require.Equal(t, 0, count(t, p, `SELECT reltuples::int FROM pg_class WHERE oid = 'aegis_job'::regclass`), "the statistics say the table is empty")

	jobs, err := w.claim(ctx, p, DefaultQueue, 100, "test-claim")
	require.NoError(t, err)
	ids, tokens := claims(jobs)
	const most = 1000 // rows of aegis_job a statement on 100 jobs may read
	for _, generic := range []bool{false, true} {
		for _, st := range []struct {
			name string
			sql  string
			args []any
		}{
			{"claim", claimSQL, []any{DefaultQueue, 100, int64(6e7), "W", "claim-1"}},
			{"adopt", adoptSQL, []any{"W", "claim-1"}},
			{"heartbeat", heartbeatSQL, []any{ids, tokens, int64(6e7)}},
			{"still held", stillHeldSQL, []any{ids, tokens}},
			{"complete batch", completeManySQL, []any{ids, tokens}},
			{"complete batch, kept", completeKeepManySQL, []any{ids[:50], tokens[:50]}},
			{"hand back", handBackSQL, []any{ids[50:], tokens[50:], "test"}},
			{"reap", reapSQL, []any{100}},
			{"promote", promoteSQL, []any{100}},
		} {
			read := rowsRead(t, p, generic, st.sql, st.args...)
			require.LessOrEqual(t, read, float64(most), "%s (generic plan: %v) read %.0f rows of aegis_job", st.name, generic, read)
		}
	}
}

func claims(jobs []*JobRow) (ids, tokens []int64) {
	for _, j := range jobs {
		ids, tokens = append(ids, j.ID), append(tokens, int64(j.Token))
	}
	return ids, tokens
}

// rowsRead runs sql under EXPLAIN ANALYZE, in a transaction that it rolls
// back, and sums the rows the plan's scans of aegis_job returned. With
// generic, the statement is prepared and run with its generic plan (what a
// cached statement gets after five runs); else it is planned for args.
func rowsRead(t *testing.T, p *pgxpool.Pool, generic bool, sql string, args ...any) float64 {
	t.Helper()
	ctx := t.Context()
	conn, err := p.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var out []byte
	if generic {
		_, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "PREPARE plan_test AS "+sql)
		require.NoError(t, err)
		defer conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE plan_test")
		params := make([]string, len(args))
		for i, a := range args {
			params[i] = literal(a)
		}
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plan_test("+strings.Join(params, ", ")+")").Scan(&out)
		require.NoError(t, err)
	} else {
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, append([]any{custom}, args...)...).Scan(&out))
	}
	var plans []struct{ Plan map[string]any }
	require.NoError(t, json.Unmarshal(out, &plans))
	var sum func(n map[string]any) float64
	sum = func(n map[string]any) float64 {
		var rows float64
		if n["Relation Name"] == "aegis_job" && n["Node Type"] != "ModifyTable" {
			rows += n["Actual Rows"].(float64) * n["Actual Loops"].(float64)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				rows += sum(k.(map[string]any))
			}
		}
		return rows
	}
	return sum(plans[0].Plan)
}

// literal writes a test argument as SQL.
func literal(a any) string {
	switch v := a.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case []int64:
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprint(x)
		}
		return "'{" + strings.Join(s, ",") + "}'"
	default:
		return fmt.Sprint(v)
	}
}

// TestClaimWithoutStatistics: right after a bulk insert into a table that
// was never vacuumed or analyzed (reltuples -1), the planner believes the
// table holds a handful of rows. The claim must still walk the claim index
// in order and stop after its LIMIT, not read every available job and sort
// them (a claim of 100 from a million took 600 ms that way).
func TestClaimWithoutStatistics(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	// 200,000: below about 100,000 jobs the claim index is small enough
	// for the planner to prefer it anyway.
	_, err := p.Exec(ctx, `INSERT INTO aegis_job (queue, kind, args, max_attempts)
		SELECT $1, 'test', jsonb_build_object('n', g), 25 FROM generate_series(1, 200000) AS g`, DefaultQueue)
	require.NoError(t, err)
	require.Equal(t, -1, count(t, p, `SELECT reltuples::int FROM pg_class WHERE oid = 'aegis_job'::regclass`), "the table was never vacuumed nor analyzed")

	w := worker("W", time.Minute, false)
	for _, generic := range []bool{false, true} {
		tx, err := p.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(ctx)) // a failed assertion must not strand the connection
		if generic {
			_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
			require.NoError(t, err)
		}
		for range 6 { // past five runs a cached statement may take its generic plan
			jobs, err := w.claim(ctx, tx, DefaultQueue, 100, "test-claim")
			require.NoError(t, err)
			require.Len(t, jobs, 100)
		}
		// Rows of aegis_job this transaction read, through any scan.
		var read int
		require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
			FROM pg_stat_xact_user_tables WHERE relid = 'aegis_job'::regclass`).Scan(&read))
		// The ordered scan reads about 400 per claim here (the claims
		// before it in this transaction left entries to step over); the
		// scan and sort of every available job read 200,000.
		require.LessOrEqual(t, read, 6*1000, "six claims of 100 jobs (generic plan: %v) read %d rows of aegis_job", generic, read)
		require.NoError(t, tx.Rollback(ctx))
	}
}
