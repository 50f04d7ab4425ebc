package schedule

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/migrate"
)

// The tick-level outcomes FindAttempts takes besides an attempt's own.
const (
	// RanTwice selects every attempt of the ticks that ran twice: a tick
	// with an attempt lost or refused, whose handler a reclaim started
	// again while the earlier attempt was still running.
	RanTwice = "ran-twice"
	// AppliedTwice selects every attempt of the ticks applied twice: two
	// attempts of one tick recorded as succeeded, which a fenced store
	// never lets happen.
	AppliedTwice = "applied-twice"
)

// outcomes are an attempt's outcomes (see Attempt.Outcome).
var outcomes = []string{"running", "succeeded", "failed", "skipped", "replaced", "abandoned", "enqueued", "lost", "refused"}

// Outcomes returns what FindAttempts takes as AttemptFilter.Outcome: an
// attempt's outcomes (see Attempt.Outcome), then RanTwice and
// AppliedTwice.
func Outcomes() []string { return append(slices.Clone(outcomes), RanTwice, AppliedTwice) }

// The operator's triage of the attempt history, one text for both
// dialects: {A} is the attempt table, {M} the missed table, {fire},
// {claimed}, {ended} their columns, {since} the time parameter $2 as the
// column's type and {twice} SQLite's hint to use the partial index below
// (without statistics its planner prefers the primary key's namespace,
// and reads the namespace's every attempt: 38 ms for 300,000, not 1 ms). $1 is the namespace. A tick (job, fire time) is in a
// window when one of its attempts was claimed in it. Only a tick with a
// second attempt can have run or been applied twice, and its attempt 2
// or later (a reclaim, or a queue worker's retry), claimed after its
// first, is in the window if any of its attempts is; so is every attempt
// lost or refused: the windows' candidate ticks are found through the
// partial index of these attempts (migration 15, SQLite 16), then all
// their attempts through the primary key.
const (
	// countsSQL counts the attempts lost and refused claimed since $2, and
	// the ticks of the window that ran twice (an attempt lost or refused)
	// and that were applied twice (two attempts succeeded).
	countsSQL = `WITH recent AS (SELECT DISTINCT job, {fire} AS fire FROM {A} {twice}
	WHERE namespace = $1 AND {claimed} >= {since} AND (attempt >= 2 OR outcome IN ('lost', 'refused'))) -- the candidates, by the partial index
SELECT coalesce(sum(lost), 0), coalesce(sum(refused), 0),
       coalesce(sum(CASE WHEN taken > 0 THEN 1 ELSE 0 END), 0), coalesce(sum(CASE WHEN succeeded > 1 THEN 1 ELSE 0 END), 0)
FROM (SELECT sum(CASE WHEN a.outcome = 'lost' AND a.{claimed} >= {since} THEN 1 ELSE 0 END) AS lost,
             sum(CASE WHEN a.outcome = 'refused' AND a.{claimed} >= {since} THEN 1 ELSE 0 END) AS refused,
             sum(CASE WHEN a.outcome IN ('lost', 'refused') THEN 1 ELSE 0 END) AS taken,
             sum(CASE WHEN a.outcome = 'succeeded' THEN 1 ELSE 0 END) AS succeeded
      FROM {A} a JOIN recent r ON a.job = r.job AND a.{fire} = r.fire
      WHERE a.namespace = $1
      GROUP BY a.job, a.{fire}) t`

	// findSQL selects the attempts claimed since $2 of job $3 ('' every
	// job) with outcome $4 ('' any); {cols} are the columns read.
	findSQL = `SELECT {cols} FROM {A} a
WHERE a.namespace = $1 AND a.{claimed} >= {since} AND ($3 = '' OR a.job = $3) AND ($4 = '' OR a.outcome = $4)`

	// findTicksSQL selects every attempt of the ticks of the window of
	// job $3 ('' every job) that ran twice ($4 = 'ran-twice') or were
	// applied twice ($4 = 'applied-twice').
	findTicksSQL = `WITH recent AS (SELECT DISTINCT job, {fire} AS fire FROM {A} {twice}
	WHERE namespace = $1 AND {claimed} >= {since} AND (attempt >= 2 OR outcome IN ('lost', 'refused')) -- the candidates, by the partial index
	AND ($3 = '' OR job = $3)),
ticks AS (SELECT a.job, a.{fire} AS fire FROM {A} a JOIN recent r ON a.job = r.job AND a.{fire} = r.fire
	WHERE a.namespace = $1
	GROUP BY a.job, a.{fire}
	HAVING ($4 = 'ran-twice' AND sum(CASE WHEN a.outcome IN ('lost', 'refused') THEN 1 ELSE 0 END) > 0)
	    OR ($4 = 'applied-twice' AND sum(CASE WHEN a.outcome = 'succeeded' THEN 1 ELSE 0 END) > 1))
SELECT {cols} FROM {A} a JOIN ticks t ON a.job = t.job AND a.{fire} = t.fire
WHERE a.namespace = $1`

	// findCols and findOrder make a find statement the read of the
	// newest $5 attempts; countFind makes it the count of at most
	// CountBound (a filter that selects a week of an every-2-s job counts
	// no more).
	findCols  = `a.job, a.{fire}, a.token, a.attempt, a.node, a.outcome, a.{claimed}, a.{ended}, coalesce(a.error, ''), coalesce(a.trace_id, '')`
	findOrder = `
ORDER BY a.{fire} DESC, a.job, a.token DESC LIMIT $5`
	countFind = `SELECT count(*) FROM (%s
LIMIT %d) c`

	// healthSQL reads job $3's last success (its end), last failure (its
	// end and error), newest tick first, and its ticks missed since $2
	// by fire time: one round trip, through the primary keys.
	healthSQL = `SELECT s.{ended}, f.{ended}, coalesce(f.error, ''),
       (SELECT count(*) FROM {M} WHERE namespace = $1 AND job = $3 AND {fire} >= {since})
FROM (SELECT 1 AS one) o
LEFT JOIN (SELECT {ended} FROM {A} WHERE namespace = $1 AND job = $3 AND outcome = 'succeeded' ORDER BY {fire} DESC, token DESC LIMIT 1) s ON true
LEFT JOIN (SELECT {ended}, error FROM {A} WHERE namespace = $1 AND job = $3 AND outcome = 'failed' ORDER BY {fire} DESC, token DESC LIMIT 1) f ON true`
)

// CountBound bounds the attempts RunReader.FindAttempts counts: a total
// of CountBound means at least that many.
const CountBound = 10000

// triage are the reader's triage statements, for its dialect: find and
// findTicks read, countFind and countTicks count.
type triage struct{ counts, find, findTicks, countFind, countTicks, health string }

// newTriage makes the triage statements; hint is {twice}.
func newTriage(d migrate.Dialect, attempts, missed, hint string) triage {
	r := strings.NewReplacer("{A}", attempts, "{M}", missed, "{fire}", "fire_at", "{claimed}", "claimed_at", "{ended}", "ended_at",
		"{since}", "timestamptz 'epoch' + $2 * interval '1 millisecond'", "{twice}", hint)
	if d == migrate.SQLite {
		r = strings.NewReplacer("{A}", attempts, "{M}", missed, "{fire}", "fire_ms", "{claimed}", "claimed_ms", "{ended}", "ended_ms", "{since}", "$2",
			"{twice}", hint)
	}
	rows := func(q string) string { return r.Replace(strings.Replace(q, "{cols}", findCols, 1) + findOrder) }
	count := func(q string) string {
		return fmt.Sprintf(countFind, r.Replace(strings.Replace(q, "{cols}", "1", 1)), CountBound)
	}
	return triage{counts: r.Replace(countsSQL), find: rows(findSQL), findTicks: rows(findTicksSQL),
		countFind: count(findSQL), countTicks: count(findTicksSQL), health: r.Replace(healthSQL)}
}

// AttemptCounts are the harm and the trouble of a window of the attempt
// history (see RunReader.Counts).
type AttemptCounts struct {
	// Lost are the attempts whose lease was lost: a later attempt took
	// the tick while they were still running. Not yet harm.
	Lost int
	// Refused are the attempts whose outcome write the fence refused:
	// they ran to their end after their tick was taken over. The fence
	// working.
	Refused int
	// RanTwice are the ticks whose handler started in two attempts (a
	// tick with an attempt lost or refused): the work was done twice.
	RanTwice int
	// AppliedTwice are the ticks with two attempts recorded as succeeded:
	// their effect landed twice. 0 on a fenced store.
	AppliedTwice int
}

// Counts counts, in the store, the namespace's attempts lost and refused
// claimed at or after since, and the ticks with an attempt claimed at or
// after since that ran twice and that were applied twice (their attempts
// before since included). A zero since counts the whole history. Compare
// since with the store's clock: the claim times are its.
func (r *RunReader) Counts(ctx context.Context, since time.Time) (AttemptCounts, error) {
	var c AttemptCounts
	var lost, refused, twice, applied int64
	t, err := r.triageSQL(ctx)
	if err != nil {
		return c, err
	}
	if err := r.db.QueryRowContext(ctx, t.counts, r.ns, sinceMS(since)).Scan(&lost, &refused, &twice, &applied); err != nil {
		return c, fmt.Errorf("schedule: count the attempt history: %w", err)
	}
	return AttemptCounts{Lost: int(lost), Refused: int(refused), RanTwice: int(twice), AppliedTwice: int(applied)}, nil
}

// triageSQL is the triage statements for the database: on SQLite, those
// without the partial index's hint while it is missing (replicas from
// before migration 16, which the reader does not apply), which would fail.
func (r *RunReader) triageSQL(ctx context.Context) (triage, error) {
	if r.dialect != migrate.SQLite {
		return r.triage, nil
	}
	var n int
	if err := r.db.QueryRowContext(ctx, r.twiceIndex, r.twiceName).Scan(&n); err != nil {
		return r.triage, fmt.Errorf("schedule: the attempt table's index: %w", err)
	}
	if n == 0 {
		return r.unhinted, nil
	}
	return r.triage, nil
}

// sinceMS is since in Unix milliseconds; the zero time is the epoch.
func sinceMS(since time.Time) int64 {
	if since.IsZero() {
		return 0
	}
	return since.UnixMilli()
}

// AttemptFilter selects attempts of the history (RunReader.FindAttempts).
type AttemptFilter struct {
	// Job is the schedule whose attempts are read. Default "": every
	// schedule's.
	Job string
	// Outcome is an attempt's outcome (see Attempt.Outcome), or RanTwice
	// or AppliedTwice for every attempt of the ticks that ran twice or
	// were applied twice. Default "": any.
	Outcome string
	// Since keeps the attempts claimed at or after it, by the store's
	// clock; with RanTwice or AppliedTwice, the ticks with an attempt
	// claimed at or after it, and all their attempts. Default zero: the
	// whole history.
	Since time.Time
	// Limit bounds the attempts returned. Required: at least 1.
	Limit int
}

// FindAttempts returns the namespace's attempts that f selects, newest
// tick first, then by job and newest attempt, at most f.Limit, and how
// many f selects in all, counted up to CountBound (0 when none). It reads
// the count, then the attempts: an attempt recorded in between can make
// them disagree by one. A filter that is not valid (an unknown outcome, a
// limit below 1, a job that is no lease key: not UTF-8, a NUL, too long)
// is an error wrapping aegis.ErrInvalid that names what is wrong.
func (r *RunReader) FindAttempts(ctx context.Context, f AttemptFilter) ([]Attempt, int, error) {
	switch {
	case f.Limit < 1:
		return nil, 0, invalid("schedule: find attempts: AttemptFilter.Limit %d is not positive", f.Limit)
	case f.Outcome != "" && !slices.Contains(Outcomes(), f.Outcome):
		return nil, 0, invalid("schedule: find attempts: AttemptFilter.Outcome %.40q is not an outcome: want one of %s", f.Outcome, strings.Join(Outcomes(), ", "))
	}
	if f.Job != "" {
		if err := driver.CheckKey(f.Job); err != nil {
			return nil, 0, fmt.Errorf("schedule: find attempts: AttemptFilter.Job: %w", err)
		}
	}
	t, err := r.triageSQL(ctx)
	if err != nil {
		return nil, 0, err
	}
	find, count := t.find, t.countFind
	if f.Outcome == RanTwice || f.Outcome == AppliedTwice {
		find, count = t.findTicks, t.countTicks
	}
	args := []any{r.ns, sinceMS(f.Since), f.Job, f.Outcome}
	var total int
	if err := r.db.QueryRowContext(ctx, count, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("schedule: count attempts: %w", err)
	}
	rows, err := r.db.QueryContext(ctx, find, append(args, f.Limit)...)
	if err != nil {
		return nil, 0, fmt.Errorf("schedule: find attempts: %w", err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		a, err := r.scanAttempt(rows)
		if err != nil {
			return nil, 0, fmt.Errorf("schedule: find attempts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("schedule: find attempts: %w", err)
	}
	return out, total, nil
}

// Health is a schedule's recent record (RunReader.Health).
type Health struct {
	Job string
	// LastSuccess is when its newest succeeded attempt (by tick) ended;
	// zero when none is on record.
	LastSuccess time.Time
	// LastFailure and LastError are when its newest failed attempt (its
	// handler returned an error) ended, and the error; zero and "" when
	// none is on record.
	LastFailure time.Time
	LastError   string
	// Missed counts its ticks missed whose fire time is at or after the
	// since given.
	Missed int
}

// Health reads job's last success, last failure and the ticks it missed
// since since (by fire time), in one round trip. It needs the attempt and
// the missed tables (NewStore creates both); on a database without them
// it fails. A job that is no lease key (empty, not UTF-8, a NUL, too
// long) is an error wrapping aegis.ErrInvalid.
func (r *RunReader) Health(ctx context.Context, job string, since time.Time) (Health, error) {
	h := Health{Job: job}
	if err := driver.CheckKey(job); err != nil {
		return h, fmt.Errorf("schedule: health: job: %w", err)
	}
	var missed int64
	var lastErr string
	var err error
	if r.dialect == migrate.SQLite {
		var ok, failed sql.NullInt64
		err = r.db.QueryRowContext(ctx, r.triage.health, r.ns, sinceMS(since), job).Scan(&ok, &failed, &lastErr, &missed)
		if ok.Valid {
			h.LastSuccess = time.UnixMilli(ok.Int64)
		}
		if failed.Valid {
			h.LastFailure = time.UnixMilli(failed.Int64)
		}
	} else {
		var ok, failed sql.NullTime
		err = r.db.QueryRowContext(ctx, r.triage.health, r.ns, sinceMS(since), job).Scan(&ok, &failed, &lastErr, &missed)
		h.LastSuccess, h.LastFailure = ok.Time, failed.Time
	}
	if err != nil {
		return Health{Job: job}, fmt.Errorf("schedule: health of %q: %w", job, err)
	}
	h.LastError, h.Missed = lastErr, int(missed)
	return h, nil
}
