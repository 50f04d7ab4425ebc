package lab

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Scenario is a preset from the seeds: one run, or several side by side.
type Scenario struct {
	Name string
	// Seed says where in the seeds it comes from; Watch what to look for.
	Seed, Watch string
	Runs        []Config
	// Parallel is how many of its runs go at once. Default 1.
	Parallel int
}

// pauseHolder is the seeds' fault: the holder paused past its 2 s TTL, in
// the middle of its critical section.
var pauseHolder = Chaos{Kind: Pause, Target: Holder, At: 2 * time.Second, For: 3 * time.Second}

func preset(strategy string, fence bool, nodes int, d time.Duration, chaos ...Chaos) Config {
	c := DefaultConfig()
	c.Strategy, c.Fence, c.Nodes, c.Duration, c.Chaos = strategy, fence, nodes, d, chaos
	return c
}

// Scenarios are the presets of `aegis lab run --scenario NAME`.
var Scenarios = []Scenario{
	{
		Name:  "invoice-export",
		Seed:  "seed 000, exercise 1: one invoice export per period, two schedulers, a crash",
		Watch: "the unique row makes each period run once, even with the winner paused; the winner killed mid-export leaves its period undone (stuck RUNNING: `aegis inspect` finds it) until a reaper reclaims it",
		Runs: []Config{preset("pg-unique", false, 2, 10*time.Second,
			Chaos{Kind: Pause, Target: Holder, At: 2 * time.Second, For: 3 * time.Second},
			Chaos{Kind: Kill, Target: Holder, At: 6 * time.Second})},
	},
	{
		Name:  "certificates",
		Seed:  "seed 000, scenario 2: the certificate queue, a worker paused past its lease",
		Watch: "the reaper hands the paused worker's job to another worker with a greater token; the resumed worker's fenced completion is refused",
		Runs:  []Config{preset("queue", true, 3, 10*time.Second, pauseHolder)},
	},
	{
		Name:  "nightly-reconciliation",
		Seed:  "seed 001, lab MID-032-LAB1: a nightly job run once across three replicas with a lease and a fencing token",
		Watch: "the holder paused past its lease is replaced within the tick; when it resumes the fence refuses its write: nothing is applied twice",
		Runs:  []Config{preset("pg-lease", true, 3, 10*time.Second, pauseHolder)},
	},
	{
		Name:  "seat-assignment",
		Seed:  "seed 000, exercise 2: a Redis SET NX PX lock around seat assignment",
		Watch: "unfenced, the Redis lock books the seat twice (duplicates_applied) when the holder pauses past the TTL; fenced, the late write is refused; the unique constraint never books a tick twice, though it does not order different ticks (a paused winner's late write shows as a lost update)",
		Runs: []Config{
			preset("redis", false, 3, 8*time.Second, pauseHolder),
			preset("redis", true, 3, 8*time.Second, pauseHolder),
			preset("pg-unique", false, 3, 8*time.Second, pauseHolder),
		},
		Parallel: 3,
	},
	{
		Name:     "aegis",
		Seed:     "seed 004: every strategy side by side, fenced and not, under the same pause of the holder",
		Watch:    "which strategies apply a tick twice (duplicates_applied) and which the checker flags; the fence turns each duplicate into a stale rejection",
		Runs:     aegisRuns(),
		Parallel: 3,
	},
}

func aegisRuns() []Config {
	var runs []Config
	for _, s := range Strategies {
		if s.Fenceable() {
			runs = append(runs, preset(s.Name, false, 3, 8*time.Second, pauseHolder))
		}
		runs = append(runs, preset(s.Name, s.Fenceable(), 3, 8*time.Second, pauseHolder))
	}
	return runs
}

// ScenarioNames lists the presets' names.
func ScenarioNames() []string {
	var names []string
	for _, s := range Scenarios {
		names = append(names, s.Name)
	}
	return names
}

// LookupScenario returns the preset called name, each run's Scenario set.
func LookupScenario(name string) (Scenario, bool) {
	i := slices.IndexFunc(Scenarios, func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return Scenario{}, false
	}
	sc := Scenarios[i]
	sc.Runs = slices.Clone(sc.Runs)
	for j := range sc.Runs {
		sc.Runs[j].Scenario = name
	}
	return sc, true
}

// RunScenario runs the scenario's runs, Parallel at a time, and returns a
// report per run in the scenario's order. A run whose strategy is
// unavailable gets a report with only Unavailable set; another error ends
// the scenario. When ctx ends, the runs stop and the reports so far (nil
// for runs that did not start) come with ctx's error. done, when not nil,
// is called as each run ends.
func (s *Session) RunScenario(ctx context.Context, sc Scenario, outDir string, done func(*Report)) ([]*Report, error) {
	reports := make([]*Report, len(sc.Runs))
	errs := make([]error, len(sc.Runs))
	sem := make(chan struct{}, max(sc.Parallel, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, c := range sc.Runs {
		c.OutDir = outDir
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			rep, err := s.runOne(ctx, c)
			if err != nil {
				errs[i] = err
				return
			}
			reports[i] = rep
			if done != nil {
				mu.Lock()
				done(rep)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return reports, ctx.Err()
}

func (s *Session) runOne(ctx context.Context, c Config) (*Report, error) {
	r, err := s.Start(ctx, c)
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return &Report{Scenario: c.Scenario, Strategy: c.Strategy, Fenced: c.fenced(), Nodes: c.Nodes, DurationS: c.Duration.Seconds(),
			Config: c, Unavailable: ue.Err.Error(), Events: []Event{}}, nil
	}
	if err != nil {
		return nil, err
	}
	return r.Wait(context.WithoutCancel(ctx))
}
