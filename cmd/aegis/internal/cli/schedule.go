package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

var scheduleCommand = command{
	name:    "schedule",
	summary: "list, put, pause, resume, run now and remove the catalog's schedules; show their runs",
	run:     runSchedule,
}

const scheduleUsage = `
usage: aegis schedule list   [--namespace NS] [--json]
       aegis schedule put    NAME (--cron SPEC | --every D) [--tz ZONE] --handler H [--args JSON] [--namespace NS]
       aegis schedule apply  -f FILE [--dry-run] [--prune] [--namespace NS]
       aegis schedule pause|resume|run-now|rm NAME [--namespace NS]
       aegis schedule runs   NAME [--limit N] [--json]

Schedule edits the catalog of schedules (package schedule's Catalog) and
shows their runs. Every replica's scheduler binds the schedules whose
handler it has (Scheduler.Handle) within a second of a change; a new spec
takes effect at an instant written into the row (EFFECTIVE), which every
replica uses, so each tick runs once across replicas, also across an edit.

	list    the namespace's schedules: spec, handler, state, version, when
	        the spec took (or takes) effect, and how many live replicas
	        have the handler; a warning names the replicas that lack it.
	        A row this version cannot read (a hand edit) is listed as
	        unreadable, with why, and the exit status is 1
	put     create NAME, or replace it whole (a flag left out takes its
	        default; a paused schedule stays paused). --cron is a cron
	        spec with seconds ("0 30 2 * * *", @daily) in --tz, an IANA
	        zone (default UTC); --every an interval aligned to the Unix
	        epoch (30s, 5m). --args is the handler's JSON (default {}).
	        A warning says when no live replica has --handler
	apply   make the namespace's schedules match FILE (YAML or JSON:
	        schedules:, a list of schedules whose keys are name and put's
	        flags; docs/schedule.md): create those it lacks, put those that
	        differ, and with --prune delete those not in FILE. Prints per
	        schedule created, updated (each field, old → new), unchanged,
	        or deleted (kept without --prune); --dry-run prints the same
	        and writes nothing. The whole file is checked first: a mistake
	        names the schedule and the key, and nothing is applied. A
	        paused schedule stays paused
	pause   claim no tick of NAME from now on; a run going ends normally
	resume  run NAME again from its next tick
	run-now one extra run of NAME as soon as a replica with its handler
	        reads the request (within a second), on one replica, with its
	        own fencing token, recorded as a run; its regular ticks stay.
	        Refused for a paused schedule
	rm      delete NAME; its runs stay in the run table
	runs    NAME's latest attempts and missed ticks, newest tick first:
	        fire time, node, fencing token, attempt, start (the claim), end
	        and outcome (also of a deleted schedule or a job defined in
	        code). A tick has a line per attempt: a reclaim of a crashed or
	        stopped run is a second one, and the first then says lost (its
	        lease lost) or refused (by the fence, when it ran on to its
	        end): the tick ran twice, its outcome recorded once. A tick no
	        replica started by its starting deadline says missed, with its
	        cause (held, unbound, paused, misfire, store, down) and the
	        replica that recorded it

Flags may come before or after NAME; every subcommand takes --store and
--namespace (default "default").

The store is --store, else $AEGIS_POSTGRES_URL, else $AEGIS_SQLITE_PATH.
A --store that begins with postgres:// or postgresql:// is a PostgreSQL
URL; sqlite://PATH and file:PATH name a SQLite file; any other value
without "://" is a SQLite file's path. Only put and apply (without
--dry-run) create a missing SQLite file; the tables are created when
missing.

Exit status 2 for a mistake in the command line or a value the catalog
refuses (the message names the flag; nothing is written, no file or
table is created), 1 when the store fails or NAME is not in the
namespace.
`

// scheduleFlags are the flags of every subcommand; each registers its own.
type scheduleFlags struct {
	store, ns string
	json      bool
	limit     int

	cron, tz, handler, args string
	every                   time.Duration
	file                    string
	dryRun, prune           bool
	misfire, overlap        string
	deadline                time.Duration
	attempts, catchUp       int
	lockMost, lockLeast     time.Duration
	noKeepAlive             bool
}

// scheduleSubs are the subcommands and the flags each takes beyond --store
// and --namespace.
var scheduleSubs = map[string][]string{
	"list":    {"json"},
	"put":     {"put"},
	"apply":   {"apply"},
	"pause":   nil,
	"resume":  nil,
	"run-now": nil,
	"rm":      nil,
	"runs":    {"limit", "json"},
}

func (f *scheduleFlags) register(fs *flagSet, groups []string) {
	fs.StringVar(&f.store, "store", "", "the store: a PostgreSQL `URL`, or a SQLite file (default $AEGIS_POSTGRES_URL, else $AEGIS_SQLITE_PATH; not shown, it may carry a password)")
	fs.StringVar(&f.ns, "namespace", schedule.DefaultNamespace, "the `namespace` of the schedules")
	for _, g := range groups {
		switch g {
		case "json":
			fs.BoolVar(&f.json, "json", false, "print JSON (an array of objects) instead of a table")
		case "limit":
			fs.IntVar(&f.limit, "limit", 20, "the most runs to show")
		case "apply":
			fs.StringVar(&f.file, "f", "", "the `file` of schedules, YAML or JSON (required)")
			fs.BoolVar(&f.dryRun, "dry-run", false, "print what apply would do, and change nothing")
			fs.BoolVar(&f.prune, "prune", false, "delete the namespace's schedules that are not in the file")
		case "put":
			fs.StringVar(&f.cron, "cron", "", "a cron `spec` with seconds, such as \"0 30 2 * * *\" or @daily")
			fs.DurationVar(&f.every, "every", 0, "an `interval`, aligned to the Unix epoch (instead of --cron)")
			fs.StringVar(&f.tz, "tz", "", "the IANA time `zone` of --cron, such as Europe/Berlin (default UTC)")
			fs.StringVar(&f.handler, "handler", "", "the handler's `name`, as the replicas register it (required)")
			fs.StringVar(&f.args, "args", "", "the handler's arguments: a `JSON` value of at most 64 KB (default {})")
			fs.StringVar(&f.misfire, "misfire", "fire-once", "what a replica does with ticks missed past --deadline: fire-once, skip or catch-up")
			fs.IntVar(&f.catchUp, "catch-up", 1, "with --misfire catch-up, how many missed ticks to run (1..1000)")
			fs.StringVar(&f.overlap, "overlap", "forbid", "a tick while the previous run goes on: forbid, replace or allow")
			fs.DurationVar(&f.deadline, "deadline", 0, "how late a tick may start and still be on time; later ones are misfires (default 0: the smaller of 10s and half the time to the next tick)")
			fs.IntVar(&f.attempts, "max-attempts", 3, "how many times run-key mode runs a tick whose runner crashed, before it is abandoned (1..1000)")
			fs.DurationVar(&f.lockMost, "lock-at-most-for", 30*time.Second, "the TTL of a run's lease or run row, renewed while it runs (at least 10ms)")
			fs.DurationVar(&f.lockLeast, "lock-at-least-for", 0, "lease mode: keep a run's lease until this long after it started (at most --lock-at-most-for)")
			fs.BoolVar(&f.noKeepAlive, "no-keep-alive", false, "do not renew a run's lease or run row: the run is cancelled at --lock-at-most-for, and another replica may take the tick")
		}
	}
}

func runSchedule(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseSchedule(args, stderr)
	if err != nil {
		return err
	}
	db, closeDB, err := openScheduleStore(ctx, c.f.store, c.given["store"], c.sub == "put" || c.sub == "apply" && !c.f.dryRun)
	if err != nil {
		return err
	}
	defer closeDB()

	if c.sub == "runs" {
		// NewStore creates the tables (and the history's) when missing.
		cfg := &schedule.StoreConfig{Namespace: c.f.ns}
		if _, err := schedule.NewStore(ctx, db, cfg); err != nil {
			return catalogError(err, c.name, c.f.ns)
		}
		reader, err := schedule.NewRunReader(ctx, db, cfg)
		if err != nil {
			return catalogError(err, c.name, c.f.ns)
		}
		return scheduleRuns(ctx, reader, c.name, c.f, stdout)
	}
	cat, err := schedule.NewCatalog(ctx, db, &schedule.CatalogConfig{Namespace: c.f.ns})
	if err != nil {
		return catalogError(err, c.name, c.f.ns)
	}
	return c.edit(ctx, cat, stdout, stderr)
}

// scheduleCmd is an `aegis schedule` command line, parsed and checked.
type scheduleCmd struct {
	sub   string // the subcommand
	name  string // NAME; "" for list
	f     scheduleFlags
	given map[string]bool  // the flags on the command line
	entry schedule.Entry   // put's schedule
	file  []schedule.Entry // apply's schedules
}

// parseSchedule parses the subcommand and its flags (or prints the usage
// for `aegis help schedule`) and checks them before any store is opened.
func parseSchedule(args []string, stderr io.Writer) (*scheduleCmd, error) {
	if len(args) == 0 {
		return nil, usagef("missing subcommand: list, put, apply, pause, resume, rm or runs")
	}
	c := &scheduleCmd{sub: args[0], given: map[string]bool{}}
	groups, ok := scheduleSubs[c.sub]
	if !ok {
		switch c.sub {
		case "-h", "-help", "--help":
			// `aegis help schedule`: the usage and every flag.
			fs := newFlagSet("schedule", stderr, scheduleUsage)
			fs.Usage = func() {} // parse prints the whole usage
			var f scheduleFlags
			f.register(fs, []string{"json", "limit", "apply", "put"})
			return nil, fs.parse([]string{"-h"})
		}
		return nil, usagef("unknown subcommand %.40q: want list, put, apply, pause, resume, rm or runs", c.sub)
	}
	fs := newFlagSet("schedule", stderr, scheduleUsage)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\nRun 'aegis help schedule' for usage.\n", scheduleSynopsis(c.sub))
	}
	if slices.ContainsFunc(args[1:], func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		fs.Usage = func() {} // parse prints the whole usage
	}
	c.f.register(fs, groups)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return nil, err
	}
	fs.Visit(func(fl *flag.Flag) { c.given[fl.Name] = true })
	if err := c.check(pos); err != nil {
		return nil, err
	}
	return c, nil
}

// check checks what the flags cannot: a given --namespace, NAME (none
// for list, one for the others), put's entry and runs' --limit.
func (c *scheduleCmd) check(pos []string) error {
	if c.given["namespace"] && c.f.ns == "" {
		// Not the default: `--namespace "$NS"` with NS unset must not
		// edit another service's schedules.
		return usagef("--namespace is empty")
	}
	switch {
	case (c.sub == "list" || c.sub == "apply") && len(pos) > 0:
		return usagef("%s: unexpected argument %.40q", c.sub, pos[0])
	case c.sub == "list":
	case c.sub == "apply":
		if c.f.file == "" {
			return usagef("apply: give -f FILE")
		}
		if err := (schedule.CatalogConfig{Namespace: c.f.ns}).Validate(); err != nil {
			return catalogError(err, "", c.f.ns)
		}
		// The whole file, before the store is opened: a mistake applies
		// nothing.
		var err error
		if c.file, err = readScheduleFile(c.f.file); err != nil {
			return err
		}
	case len(pos) == 0:
		return usagef("%s: missing NAME", c.sub)
	case len(pos) > 1:
		return usagef("%s: unexpected argument %.40q after NAME", c.sub, pos[1])
	default:
		c.name = pos[0]
		if err := checkScheduleName(c.name); err != nil {
			return err
		}
	}
	if c.sub == "put" {
		// Checked as the catalog checks them, before the store is opened:
		// a refused put creates no SQLite file and no table.
		var err error
		if c.entry, err = c.f.entry(c.name, c.given); err != nil {
			return err
		}
		if err := (schedule.CatalogConfig{Namespace: c.f.ns}).Validate(); err != nil {
			return catalogError(err, c.name, c.f.ns)
		}
		if err := c.entry.Validate(); err != nil {
			return catalogError(err, c.name, c.f.ns)
		}
	}
	if c.sub == "runs" && c.f.limit < 1 {
		return usagef("--limit %d: must be at least 1", c.f.limit)
	}
	return nil
}

// edit runs a subcommand on the catalog: list, put, pause, resume,
// run-now or rm.
func (c *scheduleCmd) edit(ctx context.Context, cat *schedule.Catalog, stdout, stderr io.Writer) error {
	name, ns := c.name, c.f.ns
	switch c.sub {
	case "list":
		return scheduleList(ctx, cat, c.f.json, stdout)
	case "put":
		return schedulePut(ctx, cat, c.entry, ns, stdout, stderr)
	case "apply":
		return scheduleApply(ctx, cat, c.file, c.f.dryRun, c.f.prune, stdout)
	case "pause":
		e, err := cat.Pause(ctx, name)
		if err != nil {
			return catalogError(notFound(ctx, cat, name, err), name, ns)
		}
		fmt.Fprintf(stdout, "paused %s at %s, version %d: no tick is claimed from then on\n", shown(e.Name), stamp(e.Updated), e.Version)
	case "resume":
		e, err := cat.Resume(ctx, name)
		if err != nil {
			return catalogError(notFound(ctx, cat, name, err), name, ns)
		}
		fmt.Fprintf(stdout, "resumed %s at %s, version %d: it runs from its next tick\n", shown(e.Name), stamp(e.Updated), e.Version)
	case "run-now":
		e, err := cat.RunNow(ctx, name)
		if errors.Is(err, schedule.ErrPaused) {
			return fmt.Errorf("%s is paused: resume it first (a run now would start a run after its pause)", shown(name))
		}
		if err != nil {
			return catalogError(notFound(ctx, cat, name, err), name, ns)
		}
		fmt.Fprintf(stdout, "asked for a run of %s now (fire time %s): one replica with handler %s runs it, with its own token; `aegis schedule runs %s` shows it\n", shown(e.Name), stamp(e.RunNow), shown(e.Handler), shown(e.Name))
	case "rm":
		if err := cat.Delete(ctx, name); err != nil {
			return catalogError(notFound(ctx, cat, name, err), name, ns)
		}
		fmt.Fprintf(stdout, "removed %s\n", shown(name))
	}
	return nil
}

// schedulePut puts entry into the catalog and says what it wrote, with a
// warning when no live replica has its handler.
func schedulePut(ctx context.Context, cat *schedule.Catalog, entry schedule.Entry, ns string, stdout, stderr io.Writer) error {
	e, err := cat.Put(ctx, entry)
	if err != nil {
		return catalogError(err, entry.Name, ns)
	}
	paused := ""
	if e.Paused {
		paused = " (paused: resume runs it)"
	}
	fmt.Fprintf(stdout, "put %s: %s, handler %s, version %d, %s%s\n", shown(e.Name), shown(e.Spec()), shown(e.Handler), e.Version,
		effectiveText(e, time.Now(), "takes effect at", "in effect since"), paused)
	if len(e.Replicas) == 0 && len(e.MissingOn) > 0 {
		// Most often a misspelt --handler: say so while the user is
		// still at the prompt.
		fmt.Fprintf(stderr, "warning: no live replica has handler %q (live: %s): %s does not run\n", e.Handler, shownList(e.MissingOn), shown(e.Name))
	}
	return nil
}

// parseInterleaved parses flags that may come before, between and after
// the positional arguments (the flag package stops at the first of them:
// users type `put tick --every 1s`), and returns the positional ones.
func parseInterleaved(fs *flagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil // after --, nothing is a flag
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// scheduleSynopsis is the usage line of sub.
func scheduleSynopsis(sub string) string {
	for _, line := range strings.Split(strings.TrimSpace(scheduleUsage), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(line, "usage:"))
		if !strings.HasPrefix(line, "aegis schedule ") {
			break
		}
		verbs, _, _ := strings.Cut(strings.TrimPrefix(line, "aegis schedule "), " ")
		for _, v := range strings.Split(verbs, "|") {
			if v == sub {
				return line
			}
		}
	}
	return "aegis schedule list|put|apply|pause|resume|rm|runs ..."
}

// checkScheduleName checks NAME as the catalog would, naming NAME rather
// than the lease key it becomes.
func checkScheduleName(name string) error {
	switch {
	case name == "":
		return usagef("NAME is empty")
	case len(name) > schedule.MaxNameLen:
		return usagef("NAME is %d bytes, at most %d are allowed", len(name), schedule.MaxNameLen)
	case !utf8.ValidString(name):
		return usagef("NAME is not valid UTF-8")
	case strings.IndexByte(name, 0) >= 0:
		return usagef("NAME contains a NUL byte")
	}
	return nil
}

// entry is the Entry that put's flags describe. The checks here are the
// command line's (which flags go together); the catalog checks the values.
func (f *scheduleFlags) entry(name string, given map[string]bool) (schedule.Entry, error) {
	switch {
	case given["cron"] && given["every"]:
		return schedule.Entry{}, usagef("put: give --cron or --every, not both")
	case !given["cron"] && !given["every"]:
		return schedule.Entry{}, usagef("put: give --cron SPEC or --every D")
	case given["cron"] && strings.TrimSpace(f.cron) == "":
		return schedule.Entry{}, usagef("--cron is empty: want a cron spec with seconds, such as \"0 30 2 * * *\"")
	case given["every"] && f.every <= 0:
		return schedule.Entry{}, usagef("--every %s: must be positive", f.every)
	case f.handler == "":
		return schedule.Entry{}, usagef("put: --handler is required: the name the replicas registered with Scheduler.Handle")
	case given["args"] && f.args == "":
		return schedule.Entry{}, usagef("--args is empty: want a JSON value, such as {}")
	}
	e := schedule.Entry{
		Name: name, Cron: f.cron, TZ: f.tz, Every: f.every, Handler: f.handler,
		CatchUpMax: f.catchUp, StartingDeadline: f.deadline, MaxAttempts: f.attempts,
		LockAtMostFor: f.lockMost, LockAtLeastFor: f.lockLeast, DisableKeepAlive: f.noKeepAlive,
	}
	if f.args != "" {
		e.Args = json.RawMessage(f.args)
	}
	var err error
	if e.Misfire, err = schedule.ParseMisfire(f.misfire); err != nil {
		return e, usagef("--misfire %.40q: want fire-once, skip or catch-up", f.misfire)
	}
	if e.Overlap, err = schedule.ParseOverlap(f.overlap); err != nil {
		return e, usagef("--overlap %.40q: want forbid, replace or allow", f.overlap)
	}
	return e, nil
}

// notFound refines an edit's ErrNotFound with Get's, which tells an
// unknown namespace from an unknown schedule: within an edit's transaction
// the catalog has already created the namespace's row, so the edit's
// error does not.
func notFound(ctx context.Context, cat *schedule.Catalog, name string, err error) error {
	if !errors.Is(err, schedule.ErrNotFound) {
		return err
	}
	if _, gerr := cat.Get(ctx, name); errors.Is(gerr, schedule.ErrNotFound) {
		return gerr
	}
	return err
}

// entryFields are the catalog's names of put's values, and their flags.
var entryFields = strings.NewReplacer(
	"Entry.Name", "NAME",
	"Entry.Cron", "--cron",
	"Entry.TZ", "--tz",
	"Entry.Every", "--every",
	"Entry.Handler", "--handler",
	"Entry.Args", "--args",
	"Entry.Misfire", "--misfire",
	"Entry.CatchUpMax", "--catch-up",
	"Entry.Overlap", "--overlap",
	"Entry.StartingDeadline", "--deadline",
	"Entry.MaxAttempts", "--max-attempts",
	"Entry.LockAtMostFor", "--lock-at-most-for",
	"Entry.LockAtLeastFor", "--lock-at-least-for",
	"CatalogConfig.Namespace", "--namespace",
	"StoreConfig.Namespace", "--namespace",
	"aegis: invalid argument: ", "",
)

// catalogError says what the catalog refused, in the command line's terms:
// the flag that is wrong (a usage error, exit 2: the caller's mistake),
// or the schedule that is not there (exit 1).
func catalogError(err error, name, ns string) error {
	switch {
	case errors.Is(err, schedule.ErrNotFound) && errors.Is(err, aegis.ErrInvalid):
		return usagef("--namespace %q is unknown: no schedule was ever put in it", ns)
	case errors.Is(err, schedule.ErrNotFound):
		return fmt.Errorf("no schedule %q in namespace %q", name, ns)
	case errors.Is(err, aegis.ErrInvalid):
		msg := err.Error()
		for _, op := range []string{"put", "pause", "resume", "delete", "get", "run now"} {
			msg = strings.TrimPrefix(msg, fmt.Sprintf("schedule: %s %q: ", op, name))
			msg = strings.TrimPrefix(msg, "schedule: "+op+": ")
		}
		msg = strings.TrimPrefix(msg, fmt.Sprintf("schedule: %q: ", name)) // Entry.Validate's
		return usagef("%s", entryFields.Replace(strings.TrimPrefix(msg, "schedule: ")))
	}
	return err
}

// openScheduleStore opens the store that --store (given: set on the
// command line), else $AEGIS_POSTGRES_URL, else $AEGIS_SQLITE_PATH names.
// A SQLite file is created only when create is set: a mistyped path must
// not show an empty catalog. No error shows a URL: it may carry a password.
func openScheduleStore(ctx context.Context, store string, given, create bool) (*sql.DB, func(), error) {
	source, pg, path := "--store", "", ""
	switch {
	case given:
		if store == "" {
			return nil, nil, usagef("--store is empty: want a PostgreSQL URL or a SQLite file")
		}
		var err error
		if pg, path, err = parseStoreFlag(store); err != nil {
			return nil, nil, err
		}
	case os.Getenv(servers.EnvPostgresURL) != "":
		source, pg = "$"+servers.EnvPostgresURL, os.Getenv(servers.EnvPostgresURL)
	case os.Getenv("AEGIS_SQLITE_PATH") != "":
		source, path = "$AEGIS_SQLITE_PATH", os.Getenv("AEGIS_SQLITE_PATH")
	default:
		return nil, nil, usagef("no store: give --store URL, or set %s (a PostgreSQL URL) or AEGIS_SQLITE_PATH (a SQLite file)", servers.EnvPostgresURL)
	}
	if pg != "" {
		db, closeDB, err := openPostgres(ctx, pg)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", source, err)
		}
		return db, closeDB, nil
	}
	if !create {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			// Masked: a PostgreSQL URL mistyped without :// reads as a path.
			return nil, nil, fmt.Errorf("%s: SQLite file %s does not exist (put creates it)", source, maskAddr(path))
		}
	}
	db, err := sqlitelease.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", source, err)
	}
	return db, func() { db.Close() }, nil
}

// connectTimeout bounds the first connection to PostgreSQL of every
// command: a server that accepts and never answers is an error, not a hang.
const connectTimeout = 10 * time.Second

// openPostgres opens a pool on url and waits at most connectTimeout for a
// first connection. Its errors name the server, never the URL: it may
// carry a password.
func openPostgres(ctx context.Context, url string) (*sql.DB, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, backend.PostgresError("open", url, err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, backend.PostgresError("connect to", url, err)
	}
	db := stdlib.OpenDBFromPool(pool)
	return db, func() { db.Close(); pool.Close() }, nil
}

// parseStoreFlag applies --store's rule: postgres:// and postgresql:// are
// PostgreSQL, sqlite://PATH and file:PATH SQLite, anything else without
// "://" a SQLite path. An unknown scheme is named, never the rest of the
// URL.
func parseStoreFlag(v string) (pg, path string, err error) {
	lower := strings.ToLower(v)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return v, "", nil
	case strings.HasPrefix(lower, "sqlite://"):
		path = v[len("sqlite://"):]
	case strings.HasPrefix(lower, "file:"):
		path = v[len("file:"):]
	default:
		if scheme, _, ok := strings.Cut(v, "://"); ok {
			return "", "", usagef("--store: unknown scheme %.20q: want postgres://, postgresql://, sqlite:// or file:, or a SQLite file's path", scheme)
		}
		return "", v, nil
	}
	switch {
	case path == "":
		return "", "", usagef("--store names no SQLite file: want sqlite://PATH or file:PATH")
	case strings.ContainsAny(path, "?#"):
		// sqlitelease.Open takes a path: a query would become part of the
		// file's name.
		return "", "", usagef("--store: a SQLite URL's query or fragment is not supported: give the file's path")
	}
	return "", path, nil
}
