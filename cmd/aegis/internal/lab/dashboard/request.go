package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
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

// pageError is an error in the words of the page: the lab's errors are
// the aegis command's, naming its flags (--tick) and quoting fault specs
// (pause:holder@0s+3s), which nobody at the page typed; the page's form
// calls them tick, TTL, work, and says which button the error answers.
func pageError(err error) string {
	var long *lab.LongWorkError
	if errors.As(err, &long) {
		return longWorkWords(long)
	}
	msg := err.Error()
	msg = specPrefix.ReplaceAllString(msg, "")
	msg = faultSubject.ReplaceAllString(msg, "this fault ")
	msg = givenServer.ReplaceAllString(msg, "this dashboard was given that server rather than starting its own (make lab lets it start its own Redis)")
	// A spec's part the page built from one of its boxes.
	if part, rest, ok := strings.Cut(msg, " "); ok && specParts[part] != "" {
		msg = specParts[part] + " " + rest
	}
	return flagName.ReplaceAllStringFunc(msg, func(f string) string {
		if w, ok := formWords[f]; ok {
			return w
		}
		return strings.TrimPrefix(f, "--")
	})
}

var (
	// specPrefix is a spec the lab's error quotes before what is wrong
	// with it: `--chaos SPEC: ` (Config.Validate) or `chaos "SPEC": `
	// (lab.ParseChaos).
	specPrefix   = regexp.MustCompile(`--chaos \S+: |chaos "(?:[^"\\]|\\.)*": `)
	faultSubject = regexp.MustCompile(`--chaos \S+ `)
	givenServer  = regexp.MustCompile(`leave (?:--[a-z-]+ and )?AEGIS_[A-Z_]+ unset so that it starts its own`)
	flagName     = regexp.MustCompile(`--[a-z][a-z-]*`)
	formWords    = map[string]string{"--ttl": "TTL", "--catalog": "the catalog", "--fence": "fence"}
	specParts    = map[string]string{"FOR": "for", "D": "clock", "SPEC": "the schedule's"}
)

// longWorkWords says what to change to add a long schedule: a run sets
// its ticks' window from its longest job when its nodes start.
func longWorkWords(e *lab.LongWorkError) string {
	s := fmt.Sprintf("%s works %s, longer than this run's longest job (%s): a run's nodes learn how long a tick may take from its longest job when they start, so a running run takes no longer one. "+
		"Give %s a work of at most %s here, or start a new run whose longest job works %s or more and add %s there",
		e.Job, e.Work, e.Longest, e.Job, e.Longest, e.Work, e.Job)
	// The Run form's catalog: its longest job works 1.5 × work, at most
	// ¾ of its cadence of three ticks.
	work := (e.Work*2/3 + time.Millisecond - 1).Truncate(time.Millisecond)
	return s + fmt.Sprintf(" (in the Run form: work %s or more, as its certificates job works 1.5 × work; with a tick long enough that 2.25 ticks are %s or more).", work, e.Work)
}
