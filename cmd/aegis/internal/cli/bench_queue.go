package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/queuebench"
)

const benchQueueUsage = `
usage: aegis bench queue [--jobs 50000] [--workers 100] [--rounds 3] [--sync] [--json] [--postgres-url URL]

Bench queue burns down N no-op jobs on the aegis queue and on the bare
protocol, in --rounds interleaved rounds (the two take turns going
first), against the PostgreSQL in AEGIS_POSTGRES_URL (or --postgres-url),
each run in a schema of its own that it drops at the end. A run inserts
the jobs with one COPY, then times until every one is completed: for
aegis a client with W workers, every completion fenced (with --sync each
in its own statement instead of a batch); for the bare protocol 2
claimers that claim 500 jobs at a time with one UPDATE … FOR UPDATE SKIP
LOCKED and delete the batch when its jobs ran.
The bare protocol is the least an at-least-once queue does, not a queue:
no fencing token, no heartbeat, no reaper (a claimer that dies leaves its
jobs claimed for ever), no retry. It prints each run's jobs/s and what
the jobs cost the server while they were worked: statements per job
(pg_stat_statements, unknown when the server does not load it), commits
per job and WAL bytes per job (counted over the whole database, WAL over
the whole server: run it on a server nothing else uses), then the median
of aegis's jobs/s over the bare protocol's. With --json it runs aegis
once (no rounds, no bare protocol) and prints one object, as scripts
outside the project read it:

	{"jobs": 50000, "workers": 100, "jobs_per_sec": 25000.5, "insert_per_sec": 160000.2}

The bare protocol's figures as JSON: cd bench && go run ./queue -mode compare -json.
`

// benchQueueJSON is what --json prints: one aegis run (a contract).
type benchQueueJSON struct {
	Jobs         int     `json:"jobs"`
	Workers      int     `json:"workers"`
	JobsPerSec   float64 `json:"jobs_per_sec"`
	InsertPerSec float64 `json:"insert_per_sec"`
}

func runBenchQueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench queue", stderr, benchQueueUsage)
	jobs := fs.Int("jobs", 50000, "how many no-op `jobs` to insert and work in each run")
	workers := fs.Int("workers", 100, "concurrent `workers` of the aegis queue client")
	rounds := fs.Int("rounds", 3, "interleaved `rounds` of aegis and the bare protocol")
	sync := fs.Bool("sync", false, "aegis completes each job in its own statement")
	asJSON := fs.Bool("json", false, "run aegis once and print one JSON object")
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
	case *rounds < 1 || *rounds > 100:
		return usagef("--rounds %d: must be between 1 and 100", *rounds)
	case fs.NArg() > 0:
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *asJSON {
		var rounded bool
		fs.Visit(func(f *flag.Flag) { rounded = rounded || f.Name == "rounds" })
		if rounded {
			return usagef("--rounds with --json: the JSON is one aegis run; leave --json out for the rounds beside the bare protocol")
		}
		res, err := queuebench.BurnDown(ctx, *url, *jobs, *workers, queuebench.Options{SyncComplete: *sync})
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(benchQueueJSON{res.Jobs, res.Workers, res.JobsPerSec, res.InsertPerSec})
	}
	subjects := []struct {
		name string
		run  func() (queuebench.Result, error)
	}{
		{"aegis", func() (queuebench.Result, error) {
			return queuebench.BurnDown(ctx, *url, *jobs, *workers, queuebench.Options{SyncComplete: *sync})
		}},
		{"bare", func() (queuebench.Result, error) {
			return queuebench.BareBurnDown(ctx, *url, *jobs, queuebench.BareOptions{})
		}},
	}
	var ratios []float64
	for r := 1; r <= *rounds; r++ {
		// The subjects take turns going first: neither always runs on the
		// machine the other one left.
		rates := make([]float64, len(subjects))
		for j := range subjects {
			i := (j + r - 1) % len(subjects)
			s := subjects[i]
			res, err := s.run()
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", s.name, r, err)
			}
			rates[i] = res.JobsPerSec
			what := fmt.Sprintf("aegis, %d workers, every completion fenced", res.Workers)
			if s.name == "bare" {
				what = fmt.Sprintf("bare protocol, %d claimers × %d", queuebench.BareDefaults.Claimers, queuebench.BareDefaults.Batch)
			}
			c := res.Cost
			if _, err := fmt.Fprintf(stdout, "round %d  %-45s %8.0f jobs/s worked, %8.0f inserted; per job: %s statements, %s commits, %s WAL bytes\n",
				r, what, res.JobsPerSec, res.InsertPerSec, perJob(c.Statements, 3), perJob(c.Commits, 3), perJob(c.WALBytes, 0)); err != nil {
				return err
			}
		}
		ratios = append(ratios, rates[0]/rates[1])
	}
	slices.Sort(ratios)
	median := (ratios[(len(ratios)-1)/2] + ratios[len(ratios)/2]) / 2
	_, err := fmt.Fprintf(stdout, "%d no-op jobs, %d rounds: aegis / bare protocol = %.2f× (median of the rounds' ratios)\n", *jobs, *rounds, median)
	return err
}

// perJob formats a figure per job with prec decimals, "?" when unknown.
func perJob(v float64, prec int) string {
	if math.IsNaN(v) {
		return "?"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}
