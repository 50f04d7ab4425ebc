package queue

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/owner"
)

// DefaultQueue is the queue of a job enqueued without one.
const DefaultQueue = "default"

// Limits on names, checked on enqueue and in Config.
const (
	MaxQueueLen     = 128  // bytes of a queue name
	MaxKindLen      = 200  // bytes of a kind
	MaxUniqueKeyLen = 1000 // bytes of a unique key
	MaxPriority     = math.MaxInt16
	MaxWorkers      = 10000 // per queue per client
)

// Config configures a Client. A nil Config, or a zero field, means the
// default the field's comment gives.
type Config struct {
	// Table is the job table, optionally schema-qualified
	// ("billing.job"); the queue's other objects are named from it:
	// <Table>_finished (finished jobs), <Table>_queue (paused queues), the
	// function <Table>_next and the indexes <Table>_fetch, _running,
	// _scheduled, _unique, _finished_at and _dead, with the LISTEN/NOTIFY
	// channel, so services with different tables share a database and a
	// schema without seeing each other's jobs. The default table keeps the
	// names it always had (aegis_job, aegis_job_finished, aegis_queue,
	// aegis_job_next). Letters, digits and _, at most 50 bytes (without
	// the schema). Default DefaultTable ("aegis_job"). Pick names whose
	// derived tables meet no other's: a Table "aegis" would name its
	// paused queues aegis_queue, the default's, and a Table "x" next to
	// one "x_finished" would share a table; Migrate then fails on the
	// existing table, or the two share it.
	Table string

	// Queues are the queues this client works, each with its own
	// concurrency. Empty means the client only enqueues and administers;
	// Start then returns an error.
	Queues map[string]QueueConfig

	// Workers are the handlers, by kind. Required when Queues is not empty.
	// Enqueue rejects a kind that has no worker unless Workers is nil or
	// AllowUnknownKinds is set.
	Workers *Workers

	// AllowUnknownKinds lets Enqueue accept kinds that Workers does not
	// have (another service works them). Default false.
	AllowUnknownKinds bool

	// ID names this client in locked_by and in logs. Default
	// "hostname/pid/random".
	ID string

	// Lease is how long a claim is held without a heartbeat (database
	// time). Heartbeats run every Lease/3; a job whose lease could not be
	// renewed has its context cancelled before the lease can expire on the
	// server. A crashed worker's jobs are reclaimed after Lease plus at
	// most ReapInterval. Default 30s; at least 100ms, at most 24h.
	Lease time.Duration

	// MaxAttempts is the attempts of a job enqueued without its own.
	// Default 25.
	MaxAttempts int

	// RetryBackoff is the delay before retrying a job whose attempt (1 for
	// the first) failed. Default: exponential from 1s, doubling, capped at
	// 1h, with equal jitter (the delay is uniform in [d/2, d]).
	RetryBackoff func(attempt int) time.Duration

	// PollInterval is how often an idle queue is polled when no
	// notification came (LISTEN/NOTIFY wakes it at once otherwise).
	// Default 1s.
	PollInterval time.Duration

	// ReapInterval is how often this client looks for expired leases, and
	// the longest a due scheduled job waits to become available. Default 1s.
	ReapInterval time.Duration

	// SyncComplete completes each job in a statement of its own before its
	// worker slot is freed. Default false: completions are batched, one
	// statement for all the jobs that finished while the previous batch was
	// written, each still fenced by its token. Either way a job that
	// completes with CompleteTx is recorded in the handler's transaction.
	SyncComplete bool

	// CompleteBatch is the most completions written in one statement.
	// Default 2000.
	CompleteBatch int

	// CompletedRetention keeps completed jobs in aegis_job_finished for
	// this long. Default 0: a completed job is deleted by its completion.
	CompletedRetention time.Duration

	// DeadRetention is how long cancelled and discarded jobs (the dead
	// letters) are kept in aegis_job_finished. Default 7 days.
	DeadRetention time.Duration

	// VacuumDeadRows makes the maintenance loop VACUUM the hot table when
	// PostgreSQL's statistics count more dead rows in it than this and
	// than live rows. A busy queue leaves two dead row versions per job
	// (the claim's update, the completion's delete), faster than
	// autovacuum's defaults (one visit a minute) clean them; the claim
	// would slow down over them. The VACUUM uses SKIP_LOCKED, so clients
	// never queue up behind each other's; it needs ownership of the table
	// (else PostgreSQL skips it with a warning). Default 10000; -1 leaves
	// vacuuming to autovacuum.
	VacuumDeadRows int

	// Registerer receives the client's Prometheus metrics. Default nil: no
	// metrics. Nothing is registered globally.
	Registerer prometheus.Registerer

	// Logger receives the client's logs. Default slog.Default().
	Logger *slog.Logger

	// TracerProvider traces the client's enqueues, claims, its jobs'
	// handler runs and the writes of their outcomes, failed heartbeats and
	// lost leases, and its reaper's passes that did work (package tracing,
	// and the package doc): aegis.queue.enqueue, .claim, .work, .complete
	// (or .retry, .snooze, .cancel, .discard), .heartbeat, .maintenance,
	// .reclaim. A handler's context carries its job's work span, so the
	// handler's own spans and its fence checks are children of it. Default
	// nil: no spans, at no cost. The global provider is not read: pass
	// otel.GetTracerProvider() to trace with it.
	TracerProvider trace.TracerProvider

	hooks  *testHooks // tests only
	tables tables     // the names derived from Table (withDefaults)
}

// QueueConfig configures one queue of a client.
type QueueConfig struct {
	// MaxWorkers is how many of the queue's jobs this client runs at once,
	// 1 to MaxWorkers. Required.
	MaxWorkers int

	// ClaimAhead is how many jobs beyond MaxWorkers the client keeps
	// claimed, so that a handler slot that frees takes its next job
	// without waiting for a claim's round trip, and claims fetch full
	// batches (graphile-worker's local queue). A job claimed ahead holds
	// its lease (heartbeats renew it) while it waits for a slot; a job
	// enqueued later with a higher priority waits behind them. Default 0;
	// at most MaxWorkers.
	ClaimAhead int
}

// testHooks let tests freeze parts of a client.
type testHooks struct {
	heartbeat func()      // called before each heartbeat round; may block
	noListen  bool        // never LISTEN: polling only
	db        func(db) db // wraps the pool the client's statements go through
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s/%d/%s", cmp.Or(host, "host"), os.Getpid(), owner.New()[:8])
	}
	cfg.Lease = cmp.Or(cfg.Lease, 30*time.Second)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 25)
	if cfg.RetryBackoff == nil {
		b := backoff.Backoff{Min: time.Second, Max: time.Hour}
		cfg.RetryBackoff = func(attempt int) time.Duration { return b.Delay(attempt - 1) }
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.ReapInterval = cmp.Or(cfg.ReapInterval, time.Second)
	cfg.CompleteBatch = cmp.Or(cfg.CompleteBatch, 2000)
	cfg.DeadRetention = cmp.Or(cfg.DeadRetention, 7*24*time.Hour)
	cfg.VacuumDeadRows = cmp.Or(cfg.VacuumDeadRows, 10000)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Table = cmp.Or(cfg.Table, DefaultTable)
	t, err := newTables("Config.Table", cfg.Table)
	if err != nil {
		return cfg, err
	}
	cfg.tables = t

	switch {
	case cfg.Lease < 100*time.Millisecond || cfg.Lease > aegis.MaxTTL:
		return cfg, invalid("Config.Lease %s: must be between 100ms and %s", cfg.Lease, aegis.MaxTTL)
	case cfg.MaxAttempts < 1:
		return cfg, invalid("Config.MaxAttempts %d: must be at least 1", cfg.MaxAttempts)
	case cfg.PollInterval < time.Millisecond:
		return cfg, invalid("Config.PollInterval %s: must be at least 1ms", cfg.PollInterval)
	case cfg.ReapInterval < time.Millisecond:
		return cfg, invalid("Config.ReapInterval %s: must be at least 1ms", cfg.ReapInterval)
	case cfg.CompleteBatch < 1 || cfg.CompleteBatch > 100000:
		return cfg, invalid("Config.CompleteBatch %d: must be between 1 and 100000", cfg.CompleteBatch)
	case cfg.CompletedRetention < 0:
		return cfg, invalid("Config.CompletedRetention %s: must not be negative", cfg.CompletedRetention)
	case cfg.VacuumDeadRows < -1:
		return cfg, invalid("Config.VacuumDeadRows %d: must be positive, or -1 for none", cfg.VacuumDeadRows)
	case cfg.DeadRetention < 0:
		return cfg, invalid("Config.DeadRetention %s: must not be negative", cfg.DeadRetention)
	case len(cfg.ID) > 200 || !utf8.ValidString(cfg.ID) || strings.ContainsRune(cfg.ID, 0):
		return cfg, invalid("Config.ID: must be valid UTF-8 without NUL, at most 200 bytes")
	case len(cfg.Queues) > 0 && cfg.Workers.empty():
		return cfg, invalid("Config.Workers: the client works queues but has no workers (use AddWorker)")
	}
	for name, q := range cfg.Queues {
		if err := checkQueue(name); err != nil {
			return cfg, invalid("Config.Queues: %v", err)
		}
		if q.MaxWorkers < 1 || q.MaxWorkers > MaxWorkers {
			return cfg, invalid("Config.Queues[%q].MaxWorkers %d: must be between 1 and %d", name, q.MaxWorkers, MaxWorkers)
		}
		if q.ClaimAhead < 0 || q.ClaimAhead > q.MaxWorkers {
			return cfg, invalid("Config.Queues[%q].ClaimAhead %d: must be between 0 and MaxWorkers (%d)", name, q.ClaimAhead, q.MaxWorkers)
		}
	}
	return cfg, nil
}

func checkQueue(name string) error {
	return checkName("queue name", name, MaxQueueLen)
}

func checkKind(kind string) error {
	return checkName("kind", kind, MaxKindLen)
}

func checkName(what, s string, maxLen int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > maxLen:
		return fmt.Errorf("%s %.40q… is %d bytes, more than %d", what, s, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%s %q contains a NUL byte", what, s)
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("%s %q has leading or trailing white space", what, s)
	}
	return nil
}

// invalid is an error in the caller's input, "queue: " and the message.
func invalid(format string, args ...any) error {
	return badinput.Errorf("queue: "+format, args...)
}
