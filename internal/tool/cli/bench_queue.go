package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/aegislab/aegis/internal/tool/backend"
	"github.com/aegislab/aegis/internal/tool/queuebench"
)

const benchQueueUsage = `
usage: aegis bench queue [--jobs 50000] [--workers 100] [--sync] [--json] [--postgres-url URL]

Bench queue inserts N no-op jobs with one COPY, then starts a queue client
with W workers and times until every job is completed (its fenced
completion written), against the PostgreSQL in AEGIS_POSTGRES_URL (or
--postgres-url), in a schema of its own that it drops at the end. With
--sync each completion is its own statement instead of a batch. With
--json it prints one object:

	{"jobs": 50000, "workers": 100, "jobs_per_sec": 25000.5, "insert_per_sec": 160000.2}
`

func runBenchQueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench queue", stderr, benchQueueUsage)
	jobs := fs.Int("jobs", 50000, "how many no-op `jobs` to insert and work")
	workers := fs.Int("workers", 100, "concurrent `workers` of the queue client")
	sync := fs.Bool("sync", false, "complete each job in its own statement")
	asJSON := fs.Bool("json", false, "print one JSON object")
	// No default shown: the variable's URL may hold a password.
	url := fs.String("postgres-url", "", "PostgreSQL `URL` (default: AEGIS_POSTGRES_URL, else the shared test server)")
	if err := fs.parse(args); err != nil {
		return err
	}
	*url = cmp.Or(*url, backend.FromEnv().PostgresURL)
	switch {
	case *jobs < 1 || *jobs > 10_000_000:
		return usagef("--jobs %d: must be between 1 and 10000000", *jobs)
	case *workers < 1 || *workers > 10000:
		return usagef("--workers %d: must be between 1 and 10000", *workers)
	case fs.NArg() > 0:
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	res, err := queuebench.BurnDown(ctx, *url, *jobs, *workers, queuebench.Options{SyncComplete: *sync})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	_, err = fmt.Fprintf(stdout, "%d no-op jobs, %d workers: %.0f jobs/s worked (every completion fenced), %.0f jobs/s inserted\n",
		res.Jobs, res.Workers, res.JobsPerSec, res.InsertPerSec)
	return err
}
