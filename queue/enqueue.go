package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aegislab/aegis/internal/errtext"
)

// MaxArgsLen is the most bytes a job's args may take as JSON: 1 MiB. A
// job's row is read by every claim and retry of it, and its args are
// decoded for every attempt; data larger than that belongs in a table or
// an object store of its own, which the args name.
const MaxArgsLen = 1 << 20

// EnqueueOpts are the options of one job. A nil *EnqueueOpts means
// defaults.
type EnqueueOpts struct {
	// Queue is the job's queue. Default DefaultQueue.
	Queue string
	// Priority orders the available jobs of a queue: lower runs first.
	// 0 (the default) to MaxPriority.
	Priority int
	// RunAt makes the job due at this time (not before). Default: now.
	RunAt time.Time
	// Delay makes the job due Delay after now, database time. Not with
	// RunAt; must not be negative.
	Delay time.Duration
	// MaxAttempts is how often the job is tried before it is discarded.
	// Default Config.MaxAttempts.
	MaxAttempts int
	// UniqueKey, when set, makes the job unique among live jobs (available,
	// scheduled or running): enqueuing a job whose key a live job holds
	// returns that job, with Enqueued.Duplicate set, and inserts nothing,
	// also when the two enqueues race. Once the job is finished the key is
	// free again; for "at most once ever" (a cron tick), insert the key
	// into a table of your own with a unique constraint in the transaction
	// of EnqueueTx. At most MaxUniqueKeyLen bytes.
	UniqueKey string
}

// EnqueueParams is one job of EnqueueMany.
type EnqueueParams struct {
	Args Args
	Opts *EnqueueOpts
}

// Enqueued is the result of Enqueue.
type Enqueued struct {
	// Job is the job inserted or, for a duplicate unique key, the live job
	// that holds the key.
	Job *JobRow
	// Duplicate is true when a live job held the unique key and nothing
	// was inserted.
	Duplicate bool
}

// insert is one checked job.
type insert struct {
	queue, kind, uniqueKey string
	args                   json.RawMessage
	priority               int16
	runAt                  *time.Time
	delay                  time.Duration
	maxAttempts            int
	traceparent            string // the enqueuer's trace context, "" for none
}

// Enqueue inserts a job in a transaction of its own; a job that is due now
// wakes the queue's idle workers (NOTIFY) when it commits.
//
// Errors name what is wrong with the input: nil args, an invalid kind
// (empty, longer than MaxKindLen, not UTF-8, with a NUL or surrounding
// white space) or one without a worker (see Config.AllowUnknownKinds),
// args that are not JSON-marshalable, that take more than MaxArgsLen bytes
// as JSON or that PostgreSQL's jsonb cannot store (a NUL, \u0000, in a
// value or a key; half a surrogate pair), an invalid queue name, a
// priority outside 0 to MaxPriority, a negative Delay, both RunAt and
// Delay, a negative MaxAttempts, an invalid UniqueKey. They wrap
// aegis.ErrInvalid, name the job's kind, and are found before any SQL:
// nothing is written, and a caller's transaction (EnqueueTx,
// EnqueueManyTx) is left usable. The same holds for every job of
// EnqueueMany and EnqueueManyTx.
//
// With Config.TracerProvider, every enqueue (Enqueue, EnqueueTx,
// EnqueueMany, EnqueueManyTx) is a span, aegis.queue.enqueue, a child of
// ctx's span. The trace context of that span, or of ctx's span for a
// client without a TracerProvider, is stored with each job (a W3C
// traceparent), and the job's first attempt runs as its child (see the
// package tracing).
func (c *Client) Enqueue(ctx context.Context, args Args, opts *EnqueueOpts) (res *Enqueued, err error) {
	in, err := c.check(args, opts)
	if err != nil {
		return nil, err
	}
	ctx, span := c.startEnqueue(ctx, &in, 0)
	defer func() { endEnqueue(span, res, err) }()
	in.traceparent = traceparentOf(ctx)
	return c.insertOne(ctx, c.db, in)
}

// EnqueueTx is Enqueue inside the caller's transaction: the job exists,
// and its notification is sent, only if tx commits. A rolled-back tx
// enqueues nothing.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, args Args, opts *EnqueueOpts) (res *Enqueued, err error) {
	if tx == nil {
		return nil, invalid("EnqueueTx: tx is nil")
	}
	in, err := c.check(args, opts)
	if err != nil {
		return nil, err
	}
	ctx, span := c.startEnqueue(ctx, &in, 0)
	defer func() { endEnqueue(span, res, err) }()
	in.traceparent = traceparentOf(ctx)
	return c.insertOne(ctx, tx, in)
}

// EnqueueMany inserts jobs in one transaction: the ones without a unique
// key with one COPY, the others one by one like Enqueue. It returns the
// jobs' ids in the order of jobs (for a duplicate unique key, the id of
// the live job that holds it). One invalid job fails the whole call, and
// nothing is written.
func (c *Client) EnqueueMany(ctx context.Context, jobs []EnqueueParams) (ids []int64, err error) {
	ctx, span := c.startEnqueue(ctx, nil, len(jobs))
	defer func() { endEnqueue(span, nil, err) }()
	err = pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		var err error
		ids, err = c.enqueueManyTx(ctx, tx, jobs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, jobs []EnqueueParams) (ids []int64, err error) {
	if tx == nil {
		return nil, invalid("EnqueueManyTx: tx is nil")
	}
	ctx, span := c.startEnqueue(ctx, nil, len(jobs))
	defer func() { endEnqueue(span, nil, err) }()
	return c.enqueueManyTx(ctx, tx, jobs)
}

// enqueueManyTx is EnqueueManyTx without its span: every job stores the
// trace context of ctx.
func (c *Client) enqueueManyTx(ctx context.Context, tx pgx.Tx, jobs []EnqueueParams) ([]int64, error) {
	parent := traceparentOf(ctx)
	ins := make([]insert, len(jobs))
	copied := 0
	for i, p := range jobs {
		in, err := c.check(p.Args, p.Opts)
		if err != nil {
			return nil, invalid("EnqueueMany: job %d: %s", i, strings.TrimPrefix(err.Error(), "queue: "))
		}
		in.traceparent = parent
		ins[i] = in
		if in.uniqueKey == "" {
			copied++
		}
	}
	ids := make([]int64, len(jobs))
	if copied > 0 {
		if err := c.copyJobs(ctx, tx, ins, ids, copied); err != nil {
			return nil, err
		}
	}
	for i, in := range ins {
		if in.uniqueKey == "" {
			continue
		}
		res, err := c.insertOne(ctx, tx, in)
		if err != nil {
			return nil, err
		}
		ids[i] = res.Job.ID
	}
	return ids, nil
}

// copyJobs inserts the jobs of ins without a unique key with COPY, and
// sets their ids.
func (c *Client) copyJobs(ctx context.Context, tx pgx.Tx, ins []insert, ids []int64, n int) error {
	rows, err := tx.Query(ctx, c.stmt(idsSQL), n)
	if err != nil {
		return fmt.Errorf("queue: EnqueueMany: %w", translate(err))
	}
	reserved, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("queue: EnqueueMany: %w", translate(err))
	}
	now := time.Now()
	var wake []string
	data := make([][]any, 0, n)
	k := 0
	for i, in := range ins {
		if in.uniqueKey != "" {
			continue
		}
		ids[i] = reserved[k]
		k++
		// COPY cannot compute run_at in the database: a delay counts from
		// this client's clock. Scheduled jobs become available through the
		// promoter, which compares run_at with database time.
		state, runAt := StateAvailable, now
		switch {
		case in.runAt != nil:
			runAt = *in.runAt
		case in.delay > 0:
			runAt = now.Add(in.delay)
		}
		if runAt.After(now) {
			state = StateScheduled
		} else if !slices.Contains(wake, in.queue) {
			wake = append(wake, in.queue)
		}
		data = append(data, []any{ids[i], in.queue, in.kind, in.args, in.priority, runAt, string(state), in.maxAttempts, nullable(in.traceparent)})
	}
	cols := []string{"id", "queue", "kind", "args", "priority", "run_at", "state", "max_attempts", "traceparent"}
	if _, err := tx.CopyFrom(ctx, c.cfg.tables.ident, cols, pgx.CopyFromRows(data)); err != nil {
		return fmt.Errorf("queue: EnqueueMany: copy: %w", translate(err))
	}
	if len(wake) > 0 {
		if _, err := tx.Exec(ctx, c.stmt(notifySQL), wake); err != nil {
			return fmt.Errorf("queue: EnqueueMany: notify: %w", translate(err))
		}
	}
	return nil
}

// insertOne inserts one job; for a unique key a live job holds, it returns
// that job instead.
func (c *Client) insertOne(ctx context.Context, q querier, in insert) (*Enqueued, error) {
	sql := c.sql.insertPlain
	var key any
	if in.uniqueKey != "" {
		sql, key = c.sql.insertUnique, in.uniqueKey
	}
	var delay int64
	if in.delay > 0 {
		delay = in.delay.Microseconds()
	}
	// A unique key's holder can finish between the conflicting insert and
	// the lookup; then the insert is tried again.
	for range 5 {
		j, err := scanInserted(q.QueryRow(ctx, sql, in.queue, in.kind, in.args, in.priority, in.runAt, delay, in.maxAttempts, key, nullable(in.traceparent)))
		if err == nil {
			return &Enqueued{Job: j}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, c.insertErr(q, in, err)
		}
		j, err = scanJob(q.QueryRow(ctx, c.stmt(uniqueSQL), in.uniqueKey), false)
		if err == nil {
			return &Enqueued{Job: j, Duplicate: true}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("queue: enqueue %q: find the holder of unique key %q: %w", in.kind, in.uniqueKey, err)
		}
	}
	return nil, fmt.Errorf("queue: enqueue %q: unique key %q: its holder kept finishing while this job was inserted; try again", in.kind, in.uniqueKey)
}

// nullable is s, or NULL when s is empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// insertErr is the error of a failed insert: the caller's mistake when
// the server refused the job's data; and, when the statement may have
// been sent and committed with its reply lost outside a transaction of
// the caller's (a broken connection), it says the job may be enqueued.
func (c *Client) insertErr(q querier, in insert, err error) error {
	var pe *pgconn.PgError
	switch _, tx := q.(pgx.Tx); {
	case errtext.Refused(err):
		return invalid("enqueue %q: the server refused the job's data: %v", in.kind, err)
	case !errors.As(err, &pe) && !pgconn.SafeToRetry(err) && !tx:
		how := "enqueue it again with the same EnqueueOpts.UniqueKey to make the retry safe"
		if in.uniqueKey != "" {
			how = "enqueuing it again with its UniqueKey returns it if it was"
		}
		return fmt.Errorf("queue: enqueue %q: the job may have been enqueued (the connection broke after the statement was sent): %s: %w", in.kind, how, err)
	}
	return fmt.Errorf("queue: enqueue %q: %w", in.kind, translate(err))
}

// scanInserted scans insertSQL's row: jobColumns and the notify column.
func scanInserted(row pgx.Row) (*JobRow, error) {
	var notified bool
	return scanJob(scannerFunc(func(dest ...any) error { return row.Scan(append(dest, &notified)...) }), false)
}

type scannerFunc func(dest ...any) error

func (f scannerFunc) Scan(dest ...any) error { return f(dest...) }

// check validates one job and encodes its args.
func (c *Client) check(args Args, opts *EnqueueOpts) (insert, error) {
	var o EnqueueOpts
	if opts != nil {
		o = *opts
	}
	if args == nil {
		return insert{}, invalid("enqueue: args are nil")
	}
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		return insert{}, invalid("enqueue: args are a nil %T", args)
	}
	kind := args.Kind()
	if err := checkKind(kind); err != nil {
		return insert{}, invalid("enqueue %T: %v", args, err)
	}
	if !c.cfg.AllowUnknownKinds && !c.cfg.Workers.empty() && c.cfg.Workers.lookup(kind) == nil {
		return insert{}, invalid("enqueue: unknown kind %q: no worker is registered for it (AddWorker), and Config.AllowUnknownKinds is false", kind)
	}
	encoded, err := json.Marshal(args)
	if err != nil {
		return insert{}, invalid("enqueue %q: the args are not JSON-marshalable: %v", kind, err)
	}
	if len(encoded) > MaxArgsLen {
		return insert{}, invalid("enqueue %q: the args are %d bytes of JSON, more than MaxArgsLen (%d)", kind, len(encoded), MaxArgsLen)
	}
	if err := storable(encoded); err != nil {
		return insert{}, invalid("enqueue %q: the args' JSON holds %v, which PostgreSQL's jsonb cannot store", kind, err)
	}
	in := insert{kind: kind, args: encoded, queue: o.Queue, uniqueKey: o.UniqueKey, delay: o.Delay}
	if in.queue == "" {
		in.queue = DefaultQueue
	} else if err := checkQueue(in.queue); err != nil {
		return insert{}, invalid("enqueue %q: EnqueueOpts.Queue: %v", kind, err)
	}
	switch {
	case o.Priority < 0 || o.Priority > MaxPriority:
		return insert{}, invalid("enqueue %q: EnqueueOpts.Priority %d: must be between 0 (first) and %d", kind, o.Priority, MaxPriority)
	case o.Delay < 0:
		return insert{}, invalid("enqueue %q: EnqueueOpts.Delay %s: must not be negative", kind, o.Delay)
	case o.Delay > 0 && !o.RunAt.IsZero():
		return insert{}, invalid("enqueue %q: EnqueueOpts: set RunAt or Delay, not both", kind)
	case o.MaxAttempts < 0:
		return insert{}, invalid("enqueue %q: EnqueueOpts.MaxAttempts %d: must not be negative (0 means Config.MaxAttempts)", kind, o.MaxAttempts)
	case len(o.UniqueKey) > MaxUniqueKeyLen:
		return insert{}, invalid("enqueue %q: EnqueueOpts.UniqueKey is %d bytes, more than %d", kind, len(o.UniqueKey), MaxUniqueKeyLen)
	case !utf8.ValidString(o.UniqueKey) || strings.ContainsRune(o.UniqueKey, 0):
		return insert{}, invalid("enqueue %q: EnqueueOpts.UniqueKey %q: must be valid UTF-8 without NUL", kind, o.UniqueKey)
	}
	in.priority = int16(o.Priority)
	in.maxAttempts = o.MaxAttempts
	if in.maxAttempts == 0 {
		in.maxAttempts = c.cfg.MaxAttempts
	}
	if !o.RunAt.IsZero() {
		t := o.RunAt
		in.runAt = &t
	}
	return in, nil
}

// storable refuses what PostgreSQL's jsonb refuses in valid JSON text:
// invalid UTF-8 (22021; json.Marshal replaces it in strings, but not in
// the output of a json.Marshaler such as json.RawMessage), the \u escapes
// \u0000 and half a surrogate pair (22P05, 22P02), and a number beyond
// numeric's range (22003). One pass over the text; a number is looked at
// closely only when it has an exponent or is long.
func storable(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("invalid UTF-8")
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			switch {
			case c == '"':
				inString = true
			case c == '-' || c >= '0' && c <= '9':
				j := i + 1
				for j < len(b) && strings.IndexByte("0123456789.eE+-", b[j]) >= 0 {
					j++
				}
				if err := numeric(b[i:j]); err != nil {
					return err
				}
				i = j - 1
			}
			continue
		}
		switch c {
		case '"':
			inString = false
			continue
		case '\\':
		default:
			continue
		}
		i++ // the escaped character: an escaped backslash is no escape
		if i >= len(b) || b[i] != 'u' {
			continue
		}
		r, ok := hex4(b, i+1)
		if !ok {
			continue // not valid JSON: json.Marshal never returns it
		}
		i += 4
		switch {
		case r == 0:
			return errors.New(`\u0000 (a NUL)`)
		case r >= 0xd800 && r < 0xdc00: // high: a low must follow
			if low, ok := hex4(b, i+3); ok && i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' && low >= 0xdc00 && low < 0xe000 {
				i += 6
				continue
			}
			return fmt.Errorf(`\u%04x, half of a surrogate pair`, r)
		case r >= 0xdc00 && r < 0xe000:
			return fmt.Errorf(`\u%04x, half of a surrogate pair`, r)
		}
	}
	return nil
}

// numeric's limits: digits before the decimal point, and after it (the
// scale).
const (
	numericDigits = 131072
	numericScale  = 16383
)

// numeric refuses a JSON number (valid JSON: -?int(.frac)?([eE][+-]?exp)?)
// that PostgreSQL's numeric cannot hold: more than 131072 digits before
// the decimal point, or a scale over 16383.
func numeric(n []byte) error {
	s := string(n)
	if len(s) <= 64 && !strings.ContainsAny(s, "eE") {
		return nil // at most 64 digits on either side
	}
	mant, exp := strings.TrimPrefix(s, "-"), int64(0)
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		// PostgreSQL refuses an exponent of INT_MAX/2 or more, even of a zero.
		e, err := strconv.ParseInt(mant[i+1:], 10, 32)
		if err != nil || e >= math.MaxInt32/2 || e <= -math.MaxInt32/2 {
			return fmt.Errorf("the number %.32s… (its exponent is out of range)", s)
		}
		mant, exp = mant[:i], e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if scale := int64(len(frac)) - exp; scale > numericScale {
		return fmt.Errorf("the number %.32s… (%d digits after the decimal point; PostgreSQL's numeric holds %d)", s, scale, numericScale)
	}
	if digits == "" {
		return nil // zero
	}
	// The point sits after int's digits, moved by the exponent; the
	// leading zeros do not count.
	lead := int64(len(intPart+frac) - len(digits))
	if before := int64(len(intPart)) + exp - lead; before > numericDigits {
		return fmt.Errorf("the number %.32s… (%d digits before the decimal point; PostgreSQL's numeric holds %d)", s, before, numericDigits)
	}
	return nil
}

// hex4 reads the four hex digits of a \u escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
