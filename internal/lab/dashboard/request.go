package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/lab"
)

// RunRequest is one run to start, as the page sends it. Fields left out
// take the defaults of `aegis lab run` ([lab.DefaultConfig]); durations
// are Go durations ("1s", "250ms").
type RunRequest struct {
	Strategy string   `json:"strategy"`
	Fence    *bool    `json:"fence,omitempty"`
	Nodes    *int     `json:"nodes,omitempty"`
	Duration string   `json:"duration,omitempty"`
	Tick     string   `json:"tick,omitempty"`
	Work     string   `json:"work,omitempty"`
	TTL      string   `json:"ttl,omitempty"`
	Chaos    []string `json:"chaos,omitempty"` // specs, as --chaos takes them
	// Catalog is the run's schedules, as --catalog takes them
	// (NAME=EVERY/WORK,...); "" is the lab's default catalog.
	Catalog string `json:"catalog,omitempty"`
}

// GroupRequest starts a preset (Scenario) or runs side by side (Runs), one
// of the two.
type GroupRequest struct {
	Scenario string       `json:"scenario,omitempty"`
	Runs     []RunRequest `json:"runs,omitempty"`
}

// ChaosRequest is a fault to inject now into a run.
type ChaosRequest struct {
	Spec string `json:"spec"`
}

// Limits of a request.
const (
	maxBody         = 64 << 10
	maxRunsPerGroup = 32
)

// decode reads one JSON value of at most maxBody bytes into v, refusing
// unknown fields.
func decode(body io.Reader, v any) error {
	d := json.NewDecoder(io.LimitReader(body, maxBody+1))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return errors.New("the request body is not complete JSON")
		}
		return fmt.Errorf("the request body: %v", err)
	}
	if d.More() {
		return errors.New("the request body has more than one JSON value")
	}
	return nil
}

// Config turns the request into a run's configuration and validates it;
// the error names the field that is wrong.
func (q RunRequest) Config() (lab.Config, error) {
	c := lab.DefaultConfig()
	c.Strategy = q.Strategy
	if q.Fence != nil {
		c.Fence = *q.Fence
	}
	if q.Nodes != nil {
		c.Nodes = *q.Nodes
	}
	for _, f := range []struct {
		name string
		s    string
		d    *time.Duration
	}{{"duration", q.Duration, &c.Duration}, {"tick", q.Tick, &c.Tick}, {"work", q.Work, &c.Work}, {"ttl", q.TTL, &c.TTL}} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(f.s))
		if err != nil {
			return lab.Config{}, fmt.Errorf("%s %q is not a duration (want one such as 1s or 250ms)", f.name, f.s)
		}
		*f.d = d
	}
	if q.Catalog != "" {
		jobs, err := lab.ParseCatalog(q.Catalog)
		if err != nil {
			return lab.Config{}, err
		}
		c.Catalog = jobs
	}
	for _, spec := range q.Chaos {
		ch, err := lab.ParseChaos(spec)
		if err != nil {
			return lab.Config{}, err
		}
		c.Chaos = append(c.Chaos, ch)
	}
	if err := c.Validate(); err != nil {
		return lab.Config{}, err
	}
	return c, nil
}

// configs returns the group's runs: the preset's, or the requested ones.
func (q GroupRequest) configs() (lab.Scenario, error) {
	switch {
	case q.Scenario != "" && len(q.Runs) > 0:
		return lab.Scenario{}, errors.New("give a scenario or runs, not both")
	case q.Scenario != "":
		sc, ok := lab.LookupScenario(q.Scenario)
		if !ok {
			return lab.Scenario{}, fmt.Errorf("scenario %q: unknown (known: %s)", q.Scenario, strings.Join(lab.ScenarioNames(), ", "))
		}
		return sc, nil
	case len(q.Runs) == 0:
		return lab.Scenario{}, errors.New("nothing to run: give a scenario or at least one run")
	case len(q.Runs) > maxRunsPerGroup:
		return lab.Scenario{}, fmt.Errorf("%d runs: want at most %d at once", len(q.Runs), maxRunsPerGroup)
	}
	sc := lab.Scenario{Parallel: len(q.Runs)}
	for i, rq := range q.Runs {
		c, err := rq.Config()
		if err != nil {
			if len(q.Runs) == 1 {
				return lab.Scenario{}, err
			}
			return lab.Scenario{}, fmt.Errorf("run %d (%s): %w", i+1, rq.Strategy, err)
		}
		sc.Runs = append(sc.Runs, c)
	}
	return sc, nil
}
