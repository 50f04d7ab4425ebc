package cli

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aegislab/aegis/internal/lab/runner"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/aegislab/aegis/internal/tool/backend"
	"github.com/aegislab/aegis/internal/tool/servers"
)

var inspectCommand = command{
	name:    "inspect",
	summary: "the runbook's queries on a PostgreSQL store (stuck, expired, tokens, duplicates)",
	run:     runInspect,
}

const inspectUsage = `
usage: aegis inspect [--postgres-url URL] [--older-than 10m] [--key K] [--limit 20] [QUERY...]

Inspect asks a PostgreSQL database the runbook's questions
about the tables Aegis keeps there: the schedule's run
table, pglease's lease table, the lab's audit. QUERY is one of

	stuck       runs RUNNING past their lease, started longer than
	            --older-than ago: a crashed winner the reaper must retry
	expired     leases that ran out instead of being released
	tokens      the token history of --key (lab-RUN/JOB for a lab run's
	            job, in lower case; every run's when unset)
	duplicates  recent job ticks whose effect was committed more than once

None means all. A question whose table is missing is skipped.
`

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", stderr, inspectUsage)
	url := fs.String("postgres-url", "", "PostgreSQL `URL` (default $AEGIS_POSTGRES_URL; not shown, it may carry a password)")
	var o runner.InspectOptions
	fs.DurationVar(&o.OlderThan, "older-than", 10*time.Minute, "how long a claim may stay RUNNING before it is stuck")
	fs.StringVar(&o.Key, "key", "", "the lease `key` whose token history to show")
	fs.IntVar(&o.Limit, "limit", 20, "rows per answer")
	if err := fs.parse(args); err != nil {
		return err
	}
	var known []string
	for _, q := range runner.InspectQueries {
		known = append(known, q.Name)
	}
	for _, a := range fs.Args() {
		if !slices.Contains(known, a) {
			return usagef("unknown query %q (known: %s)", a, strings.Join(known, ", "))
		}
	}
	// $AEGIS_POSTGRES_URL stands in for the flag when it is not given; a
	// flag given empty is empty.
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "postgres-url" })
	if !given {
		*url = os.Getenv(servers.EnvPostgresURL)
	}
	switch {
	case *url == "":
		return usagef("--postgres-url (or AEGIS_POSTGRES_URL) is required")
	case o.OlderThan <= 0:
		return usagef("--older-than %s: must be positive", o.OlderThan)
	case o.Limit < 1:
		return usagef("--limit %d: must be at least 1", o.Limit)
	}
	db, err := sql.Open("pgx", *url)
	if err != nil {
		return backend.PostgresError("open", *url, err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return backend.PostgresError("connect to", *url, err)
	}
	answers, err := runner.Inspect(ctx, db, fs.Args(), o)
	if err != nil {
		return err
	}
	for i, a := range answers {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s — %s\n", a.Query.Name, a.Query.Title)
		switch {
		case a.Skipped != "":
			fmt.Fprintf(stdout, "  (skipped: %s)\n", a.Skipped)
			continue
		case len(a.Rows) == 0:
			fmt.Fprintln(stdout, "  (none)")
			continue
		}
		tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\n", strings.Join(a.Columns, "\t"))
		for _, row := range a.Rows {
			fmt.Fprintf(tw, "  %s\n", strings.Join(row, "\t"))
		}
		_ = tw.Flush()
	}
	return nil
}
