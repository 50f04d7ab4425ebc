package lab

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aegislab/aegis/schedule"
)

// JobSpec is one schedule of a run's catalog: the lab's Task Scheduler
// runs several, each with its own cadence and run time, and each with its
// own ledger row (the counter its critical section increments).
type JobSpec struct {
	Name  string
	Every time.Duration // the cadence: a whole number of ticks
	Work  time.Duration // how long its critical section works
	// NoKeepAlive: the run's lease (or run row) is not renewed while it
	// works, so a run longer than the TTL (LockAtMostFor) loses it
	// mid-run (ShedLock without KeepAliveLockProvider).
	NoKeepAlive bool
}

// String is the spec form of --catalog: NAME=EVERY/WORK[/no-keep-alive].
func (j JobSpec) String() string {
	s := fmt.Sprintf("%s=%s/%s", j.Name, j.Every, j.Work)
	if j.NoKeepAlive {
		s += "/" + noKeepAlive
	}
	return s
}

const noKeepAlive = "no-keep-alive"

// Limits of a run's catalog.
const (
	MaxJobs       = 8
	maxJobNameLen = 40
)

var jobNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ParseCatalog parses --catalog: a comma-separated list of
// NAME=EVERY/WORK[/no-keep-alive], such as
// "invoice-export=1s/300ms,certificates=3s/800ms" (EVERY and WORK are Go
// durations). The error quotes the spec and says what is wrong.
func ParseCatalog(spec string) ([]JobSpec, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, invalid("--catalog %q: empty (want NAME=EVERY/WORK, comma-separated)", spec)
	}
	var jobs []JobSpec
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		name, rest, ok := strings.Cut(part, "=")
		every, work, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 {
			return nil, invalid("--catalog %q: %q is not NAME=EVERY/WORK (such as invoice-export=1s/300ms)", spec, part)
		}
		j := JobSpec{Name: name}
		if w, opt, ok := strings.Cut(work, "/"); ok {
			if opt != noKeepAlive {
				return nil, invalid("--catalog %q: %s: %q is not an option (the one option is %s)", spec, name, opt, noKeepAlive)
			}
			work, j.NoKeepAlive = w, true
		}
		var err error
		if j.Every, err = time.ParseDuration(every); err != nil {
			return nil, invalid("--catalog %q: %s: EVERY %q is not a duration", spec, name, every)
		}
		if j.Work, err = time.ParseDuration(work); err != nil {
			return nil, invalid("--catalog %q: %s: WORK %q is not a duration", spec, name, work)
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// FormatCatalog is the --catalog form of jobs.
func FormatCatalog(jobs []JobSpec) string {
	parts := make([]string, len(jobs))
	for i, j := range jobs {
		parts[i] = j.String()
	}
	return strings.Join(parts, ",")
}

// DefaultCatalog is the catalog of a run that gives none: the seeds' jobs,
// at cadences of one, two and three ticks, working for the run's --work,
// half of it, and one and a half times it (capped below the cadence).
func DefaultCatalog(tick, work time.Duration) []JobSpec {
	capped := func(w, every time.Duration) time.Duration { return min(w, every*3/4) }
	return []JobSpec{
		{Name: "invoice-export", Every: tick, Work: capped(work, tick)},
		{Name: "seat-assignment", Every: 2 * tick, Work: capped(work/2, 2*tick)},
		{Name: "certificates", Every: 3 * tick, Work: capped(work*3/2, 3*tick)},
	}
}

// checkJobs checks a run's catalog against its tick.
func checkJobs(jobs []JobSpec, tick time.Duration) error {
	switch {
	case tick <= 0:
		// Validate says so first; CheckChaos may be given a zero Config.
		return invalid("--tick %s: must be positive", tick)
	case len(jobs) > MaxJobs:
		return invalid("--catalog: %d jobs, want at most %d", len(jobs), MaxJobs)
	}
	seen := map[string]bool{}
	for _, j := range jobs {
		switch {
		case len(j.Name) > maxJobNameLen || !jobNamePattern.MatchString(j.Name):
			return invalid("--catalog: job name %.50q: want 1 to %d of a-z, 0-9, '-' and '_', starting with a letter or digit", j.Name, maxJobNameLen)
		case seen[j.Name]:
			return invalid("--catalog: job %q twice", j.Name)
		case j.Every < tick || j.Every%tick != 0:
			return invalid("--catalog: %s: EVERY %s is not a whole number of ticks (--tick %s)", j.Name, j.Every, tick)
		case j.Work < 0:
			return invalid("--catalog: %s: WORK %s is negative", j.Name, j.Work)
		case j.Work >= j.Every && !j.NoKeepAlive:
			return invalid("--catalog: %s: WORK %s is not shorter than EVERY %s (a run longer than its cadence is the no-keep-alive preset's story)", j.Name, j.Work, j.Every)
		case j.Work >= 3*j.Every:
			return invalid("--catalog: %s: WORK %s is three times EVERY %s or more", j.Name, j.Work, j.Every)
		}
		seen[j.Name] = true
	}
	return nil
}

// JobArgs is a catalog row's args: what the node's handler needs.
type JobArgs struct {
	WorkMS int64 `json:"work_ms"`
}

// Entry is the catalog row of j in a run with cfg: LockAtMostFor is the
// run's TTL (kept alive while the job runs), and in lease mode
// LockAtLeastFor is half the cadence (at most the TTL) (ShedLock's guard against replicas whose
// clocks differ by less than it); a tick that cannot start within a tick
// of its fire time is dropped, so a restarted node does not run the tick
// its earlier life was killed in.
func (j JobSpec) Entry(cfg Config) schedule.Entry {
	args, _ := json.Marshal(JobArgs{WorkMS: j.Work.Milliseconds()})
	e := schedule.Entry{
		Name: j.Name, Every: j.Every, Handler: LabHandler, Args: args,
		Misfire: schedule.MisfireSkip, StartingDeadline: cfg.Tick,
		MaxAttempts: 3, LockAtMostFor: cfg.TTL, DisableKeepAlive: j.NoKeepAlive,
	}
	if s, _ := LookupStrategy(cfg.Strategy); s.Mode == schedule.ModeLease {
		// A run key already stops a second run of a tick; a lease stops it
		// only while held: a replica that tries the tick later than
		// LockAtLeastFor after its fire time (its clock lags, or it was
		// paused at the fire time) would find the key free. So a tick
		// that starts later than that is a misfire.
		// At most LockAtMostFor; whole milliseconds, as the catalog stores.
		e.LockAtLeastFor = min(j.Every/2, cfg.TTL).Truncate(time.Millisecond)
		if s.Guarantee(cfg.Fence).Once == OnceSkew {
			// What once per tick rests on; a strategy that does not claim
			// it keeps a tick's worth of lateness.
			e.StartingDeadline = min(e.StartingDeadline, e.LockAtLeastFor)
		}
	}
	return e
}

// LabHandler is the name every node registers its critical section under.
const LabHandler = "lab-ledger"

// Fires lists the ticks (1-based numbers of the run's tick grid) at which
// j fires in a run of ticks ticks from start (firesAt).
func (j JobSpec) Fires(start time.Time, tick time.Duration, ticks int, edits []CatalogEdit) []int {
	var out []int
	for t := 1; t <= ticks; t++ {
		if j.FiresAt(start.Add(time.Duration(t-1)*tick), edits) {
			out = append(out, t)
		}
	}
	return out
}

// FiresAt reports whether j fires at the grid instant at: on an
// epoch-aligned multiple of its cadence (schedule.Interval), as the run's
// edits before at (in order) left its cadence, not paused, and not before
// an edit added it.
func (j JobSpec) FiresAt(at time.Time, edits []CatalogEdit) bool {
	every, paused := j.Every, false
	for _, e := range edits {
		if e.Job == j.Name && e.Added && e.At.After(at) {
			return false
		}
	}
	for _, e := range edits {
		if e.Job != j.Name || e.At.After(at) {
			continue
		}
		if e.Every != 0 {
			every = e.Every
		}
		if e.Paused != nil {
			paused = *e.Paused
		}
	}
	return !paused && at.UnixNano()%int64(every) == 0
}

// CatalogEdit is an edit of the run's catalog: from At on, the job fires
// every Every (0: unchanged), or not at all while paused; Added: the job
// was added to the catalog then, and fires from At on.
type CatalogEdit struct {
	Job    string
	At     time.Time
	Every  time.Duration
	Paused *bool
	Added  bool
}
