package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/webaccess"
	"github.com/aegislab/aegis/queue"
)

var consoleCommand = command{
	name:    "console",
	summary: "the operator's web console over a production database: leases, schedules, runs, the queue, the fence",
	run:     runConsole,
}

// DefaultConsoleAddr is where `aegis console` listens by default.
const DefaultConsoleAddr = "127.0.0.1:7080"

const consoleUsage = `
usage: aegis console [--addr 127.0.0.1:7080] [--store URL] [--namespace NS] [--token T | --user U] [--read-only] [--trace-url URL] [--queue-table T] [--fence-table T]

Console serves a web console over the database Aegis keeps its state in:
every lease key with its token, holder and expiry (database time) and,
when the Lockers keep it, its last grants; the schedule catalog with each
schedule's handler status, last success and failure, misses and next
fire, the stuck runs, every attempt of each tick with node, token and
outcome, filtered by outcome, schedule and time (one whose lease was lost
or whose outcome the fence refused marked: its tick ran twice), and the
missed ticks with their cause and the replica that recorded them (the
overview counts the last hour's and day's); the queue's jobs by queue and state, a job's attempts with their
tokens and errors, the last hour's throughput and waits, dead letters;
and the fence's resources with their last accepted token and the
refusals counted. After a confirmation, a schedule can be paused, resumed
or run now, and a dead job retried or discarded, a live one cancelled.

The store is --store (postgres://…, or a SQLite file), else
$AEGIS_POSTGRES_URL, else $AEGIS_SQLITE_PATH; it is never printed. On a
loopback address the console needs no credentials; on any other it needs
--token (generated and printed when neither --token nor --user is given)
or --user with the password in $AEGIS_CONSOLE_PASSWORD (never a flag,
which other users of the machine can read). --read-only hides and refuses
every change.

--trace-url links each attempt that has a trace id (its scheduler traced
it) to a trace viewer: an http or https URL with {trace_id} where the id
goes, such as http://localhost:16686/trace/{trace_id} (Jaeger's UI).
Without it the id is shown as text. It may not carry a user or password,
which every page would show.

--queue-table and --fence-table name the queue's job table and the fence
table the pages read, as the service configured them (queue.Config.Table,
fence.Config.Table; optionally schema-qualified), when it has tables of
its own on a database it shares; the tables named from them are read
with them.
`

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("console", stderr, consoleUsage)
	addr := fs.String("addr", DefaultConsoleAddr, "`host:port` to serve on; an address other than loopback needs a token or a user")
	store := fs.String("store", "", "the store: a PostgreSQL `URL` or a SQLite file (default $AEGIS_POSTGRES_URL, else $AEGIS_SQLITE_PATH; never printed)")
	ns := fs.String("namespace", "", "the schedule catalog's `namespace` (default \"default\")")
	token := fs.String("token", "", "the `token` every request must carry (default: none on loopback, else generated and printed)")
	user := fs.String("user", "", "basic authentication's `user`; the password is $AEGIS_CONSOLE_PASSWORD")
	readOnly := fs.Bool("read-only", false, "hide and refuse every change")
	traceURL := fs.String("trace-url", "", "link attempts to their traces: a `URL` with "+console.TracePlaceholder+" where the trace id goes (default: the id as text)")
	queueTable := fs.String("queue-table", queue.DefaultTable, "the queue's job `table` (queue.Config.Table)")
	fenceTable := fs.String("fence-table", fence.DefaultTable, "the fence `table` (fence.Config.Table)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := checkTables(*queueTable, *fenceTable); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return usagef("--addr %q: want host:port, such as %s", *addr, DefaultConsoleAddr)
	}
	if err := console.CheckTraceURL(*traceURL); err != nil {
		return usagef("--trace-url %v", err)
	}
	password := os.Getenv("AEGIS_CONSOLE_PASSWORD")
	switch {
	case *user != "" && password == "":
		return usagef("--user %s: set the password in $AEGIS_CONSOLE_PASSWORD", *user)
	case *user == "" && password != "":
		return usagef("$AEGIS_CONSOLE_PASSWORD is set without --user")
	}
	generated := false
	if *token == "" && *user == "" && !webaccess.Loopback(*addr) {
		*token, generated = webaccess.NewToken(), true
	}
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "store" {
			given = true
		}
	})
	db, closeDB, err := openScheduleStore(ctx, *store, given, false)
	if err != nil {
		return err
	}
	defer closeDB()
	srv, err := console.New(ctx, &console.Config{DB: db, Addr: *addr, Namespace: *ns, Token: *token, User: *user, Password: password, ReadOnly: *readOnly, TraceURL: *traceURL,
		QueueTable: *queueTable, FenceTable: *fenceTable,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	url := dashboardURL(ln.Addr().(*net.TCPAddr), *addr)
	switch {
	case generated:
		fmt.Fprintf(stdout, "aegis console: at %s?token=%s\n", url, *token)
		fmt.Fprintf(stdout, "aegis console: %s is not loopback: every request needs the token %s (the URL above carries it)\n", *addr, *token)
	case *token != "":
		fmt.Fprintf(stdout, "aegis console: at %s (open it with ?token=YOUR-TOKEN once)\n", url)
	case *user != "":
		fmt.Fprintf(stdout, "aegis console: at %s (user %s)\n", url, *user)
	default:
		fmt.Fprintf(stdout, "aegis console: at %s\n", url)
	}
	if *readOnly {
		fmt.Fprintln(stdout, "aegis console: read-only")
	}
	return serveConsole(ctx, &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}, ln)
}

// serveConsole serves on ln until ctx ends, then shuts the server down
// within 5s.
func serveConsole(ctx context.Context, hs *http.Server, ln net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve the console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("stop the console: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the console: %w", err)
	}
	return nil
}

// checkTables checks the names of --queue-table and --fence-table (the
// packages check their lengths too: console.New's error then names the
// Config field).
func checkTables(queueTable, fenceTable string) error {
	if _, err := migrate.Table("--queue-table", queueTable); err != nil {
		return usagef("%v", err)
	}
	if _, err := migrate.Table("--fence-table", fenceTable); err != nil {
		return usagef("%v", err)
	}
	return nil
}
