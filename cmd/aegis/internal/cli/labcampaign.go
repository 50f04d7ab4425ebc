package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

const labCampaignUsage = `
usage: aegis lab campaign --seed N --runs K [--strategy S]... [--fence=true|false] [--json]
                          [--tick D] [--ticks N] [--out DIR] [--max-inconclusive 10]

Lab campaign runs, for each strategy (default: every strategy this lab can
run; the others are listed as skipped, with why), K runs drawn from a
random generator seeded by N and the strategy's name: 3 to 5 nodes, 6 to
12 ticks of 500ms to 1s, 100ms to 400ms of work, a TTL of 0.5 to 3 times
work + tick, and 3 to 5 faults from the kinds the strategy's servers allow
(pause and partition shorter or longer than the TTL, a partition to one
server, kill, skew, latency, a catalog edit, the holder, writer or a node
as target; a kill of the next node to commit, right after its commit;
in leader mode a kill or a pause of the leader; and, when the lab started
the server itself, Redis failover and restart, crash:postgres, kill:etcd,
kill:zookeeper and kill:nats). The same seed
draws the same runs. At most two runs go at once; a run that kills or
restarts a server goes alone.

It prints a table: per strategy, whether it was fenced, what its label
guarantees, the runs, the harmed runs (a tick applied twice, a lost
update, a stale token accepted, or a checker that disagreed with the
store), the unsafe runs (a harm the strategy's label excludes in that run:
Strategy.Excludes), how many runs' checker verdict agreed with the store,
the inconclusive runs (no harm, but a node exited on its configuration,
under half the job ticks executed or a fault found no target: they prove
nothing), the re-fires (ticks run again after they had committed, counted from the
store and from the nodes' events, which must agree; for a strategy
labelled safe, "(N allowed)" counts the ones its label allows: a reaper's
retry, or clocks set apart by more than LockAtLeastFor) and the harms
seen; then each harmed run's 'aegis lab run' command line, which replays
it, and each inconclusive run's with why. With --json it prints one JSON
object instead: {"seed", "runs", "strategies": [{"strategy", "fenced",
"labelled_safe", "guarantee", "runs", "harmed", "unsafe", "agree",
"inconclusive", "refires", "refires_excluded", "harms", "harmed_runs":
[{"command", "harms", "excluded", "disagreement"}], "inconclusive_runs":
[{"command", "reasons"}], "skipped"}], "duration_s"}.

Exit status 1 when a run showed a harm its strategy's label excludes, or a
checker that disagreed with the store (a lab bug), when more than
--max-inconclusive percent (default 10) of the runs were inconclusive, or
when no strategy could run; 0 otherwise; 2 for bad flags. Servers are
found and started as for 'aegis lab run'.
`

// stringsFlag collects a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func runLabCampaign(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab", stderr, labCampaignUsage)
	c := runner.Campaign{}
	fs.Uint64Var(&c.Seed, "seed", 1, "the random generator's `seed`")
	fs.IntVar(&c.Runs, "runs", 20, "runs per strategy, 1 to 1000")
	var strategies stringsFlag
	fs.Var(&strategies, "strategy", "a `strategy` to run (repeatable; default: every strategy available)")
	fs.BoolVar(&c.Fence, "fence", true, "write through the fence")
	fs.DurationVar(&c.Tick, "tick", 0, "every run's tick instead of a drawn one (0: drawn)")
	fs.IntVar(&c.Ticks, "ticks", 0, "every run's number of ticks instead of a drawn one (0: drawn)")
	maxInconclusive := fs.Float64("max-inconclusive", runner.DefaultMaxInconclusive*100, "fail when more than this `percent` of the runs are inconclusive")
	asJSON := fs.Bool("json", false, "print one JSON object")
	fs.StringVar(&c.OutDir, "out", "", "`directory` for the checker's visualisations of violations (default: none written)")
	dir := fs.String("dir", "", "scratch `directory` for the servers the lab starts (default: a temporary one, removed on exit)")
	given := labServerFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	c.Strategies = strategies
	if err := c.Validate(); err != nil {
		return usagef("%v", err)
	}
	if *maxInconclusive < 0 || *maxInconclusive > 100 {
		return usagef("--max-inconclusive %g: want a percent, 0 to 100", *maxInconclusive)
	}

	s, err := runner.NewSession(runner.Options{Dir: *dir, Servers: given(), Log: stderr})
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(stderr, "aegis lab: stop the servers: %v\n", err)
		}
	}()
	begin := time.Now()
	res, err := s.RunCampaign(ctx, c, func(r runner.CampaignRun) {
		verdict := "no harm"
		if len(r.Harms) > 0 {
			verdict = "harm (" + strings.Join(r.Harms, ", ") + ")"
		}
		if !r.Agree {
			verdict += "; the checker disagrees with the store"
		}
		if r.Report.Verdict == lab.VerdictInconclusive {
			verdict = "inconclusive: " + strings.Join(r.Report.Inconclusive, "; ")
		}
		fmt.Fprintf(stderr, "aegis lab campaign: [%d/%d] %s after %.0fs: %s\n", r.N, r.Of, r.Config, time.Since(begin).Seconds(), verdict)
	})
	if res == nil || (err != nil && !errors.Is(err, context.Canceled)) {
		return err
	}
	if *asJSON {
		if werr := json.NewEncoder(stdout).Encode(res); werr != nil {
			return werr
		}
	} else if werr := res.WriteTable(stdout); werr != nil {
		return werr
	}
	if err != nil {
		return errors.New("interrupted: the table covers the runs that ended until then")
	}
	ran := 0
	for _, r := range res.Strategies {
		ran += r.Runs
	}
	if ran == 0 {
		return errors.New("campaign: no run: every strategy was skipped")
	}
	if refuted := res.Refuted(); len(refuted) > 0 {
		var rows []string
		for _, r := range refuted {
			rows = append(rows, fmt.Sprintf("%s (%d of %d runs unsafe: a harm its label excludes; %d disagree with the store)", r.Strategy, r.Unsafe, r.Runs, r.Runs-r.Agree))
		}
		return fmt.Errorf("campaign: harm the labels exclude, or a checker that disagrees with the store: %s", strings.Join(rows, ", "))
	}
	if why := res.TooInconclusive(*maxInconclusive / 100); why != "" {
		return fmt.Errorf("campaign: %s; the inconclusive runs are listed under the table", why)
	}
	return nil
}
