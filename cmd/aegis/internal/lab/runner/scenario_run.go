package runner

import (
	"context"
	"errors"
	"sync"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
)

// RunScenario runs the scenario's runs, Parallel at a time, and returns a
// report per run in the scenario's order. A run whose strategy is
// unavailable gets a report with only Unavailable set; another error ends
// the scenario. When ctx ends, the runs stop and the reports so far (nil
// for runs that did not start) come with ctx's error. done, when not nil,
// is called as each run ends.
func (s *Session) RunScenario(ctx context.Context, sc lab.Scenario, outDir string, done func(*lab.Report)) ([]*lab.Report, error) {
	reports := make([]*lab.Report, len(sc.Runs))
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

func (s *Session) runOne(ctx context.Context, c lab.Config) (*lab.Report, error) {
	r, err := s.Start(ctx, c)
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return &lab.Report{Scenario: c.Scenario, Strategy: c.Strategy, Fenced: c.Fenced(), Nodes: c.Nodes, DurationS: c.Duration.Seconds(),
			Config: c, ConfigJSON: c.JSON(), Unavailable: ue.Err.Error(), Events: []lab.Event{}, Harms: []lab.Harm{}, Unsafe: []lab.Harm{},
			Jobs: []lab.JobReport{}, Notes: []string{}, StoreAgrees: true}, nil
	}
	if err != nil {
		return nil, err
	}
	return r.Wait(context.WithoutCancel(ctx))
}
