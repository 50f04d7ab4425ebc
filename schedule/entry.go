package schedule

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aegislab/aegis/driver"
)

// Entry is one schedule of the catalog: a row of its table. Put reads the
// fields up to DisableKeepAlive; the catalog sets the rest.
type Entry struct {
	// Name identifies the schedule in its namespace: its run key's first
	// half. Required; at most MaxNameLen bytes of UTF-8 without NUL.
	Name string
	// Cron is a cron spec with seconds (see Cron), without a zone: the zone
	// is TZ. Exactly one of Cron and Every is set.
	Cron string
	// TZ is the IANA time zone of Cron, such as Europe/Berlin. Default UTC.
	TZ string
	// Every is a fixed interval aligned to the Unix epoch (see Interval).
	Every time.Duration
	// Handler names the code that runs the schedule's ticks: a handler
	// registered with Scheduler.Handle on the replicas that run it.
	// Required; at most MaxNameLen bytes.
	Handler string
	// Args are given to the handler: a JSON value of at most MaxArgsLen
	// bytes of UTF-8. Default {}.
	Args json.RawMessage

	// The policies, as Job's (defaults included), their durations in
	// whole milliseconds: the catalog stores milliseconds, and a deadline
	// of 500µs would read back as 0, the default.
	Misfire          Misfire
	CatchUpMax       int
	Overlap          Overlap
	StartingDeadline time.Duration
	MaxAttempts      int
	LockAtMostFor    time.Duration
	LockAtLeastFor   time.Duration // lease mode only
	// DisableKeepAlive stops renewing the run's lease (or run row) while
	// it runs: the run is cancelled at LockAtMostFor, and another replica
	// may take the tick over (ShedLock without KeepAliveLockProvider).
	DisableKeepAlive bool

	// Set by the catalog (Put ignores them).
	Namespace string
	Paused    bool
	// Version counts the namespace's changes: every put, pause, resume
	// and delete gets the next one, so a greater version is a later change.
	Version int64
	// EffectiveAt is when the spec takes effect: the ticks before it follow
	// Previous (none when Previous is empty). Every replica fires the same
	// ticks around an edit because they all read this instant from the row.
	EffectiveAt time.Time
	Previous    string    // the spec before EffectiveAt, as Spec writes it
	Resumed     time.Time // the last Resume: no tick before it runs (zero: never paused)
	Created     time.Time
	Updated     time.Time
	// RunNow is the fire time of the latest Catalog.RunNow (zero: none):
	// the fire time of its run in the run table.
	RunNow time.Time
	// Replicas are the live replicas of the namespace that have the
	// handler; MissingOn the live ones that do not (Get and List fill
	// them from the replicas' heartbeats).
	Replicas  []string
	MissingOn []string
}

// Spec is the entry's spec as the CLI writes it: "0 30 2 * * * (Europe/Berlin)"
// or "@every 1m0s".
func (e Entry) Spec() string {
	spec, tz := e.storedSpec()
	return specText(spec, tz)
}

func specText(spec, tz string) string {
	if tz == "" {
		return spec
	}
	return spec + " (" + tz + ")"
}

// storedSpec is the spec and zone as the row keeps them: a cron spec with
// its zone, or "@every D" and no zone.
func (e Entry) storedSpec() (spec, tz string) {
	if e.Every != 0 {
		return Every(e.Every).String(), ""
	}
	return strings.TrimSpace(e.Cron), cmp.Or(e.TZ, "UTC")
}

// parseStored parses a row's spec.
func parseStored(spec, tz string) (Schedule, error) {
	if tz == "" {
		return ParseCron(spec)
	}
	return ParseCron("TZ=" + tz + " " + spec)
}

// Validate checks e as Catalog.Put does, without a store: Name and the
// fields Put reads (the catalog sets the others; Validate ignores them). A
// nil error means Put takes e, unless the store fails; an error names the
// field and wraps aegis.ErrInvalid.
func (e Entry) Validate() error {
	if err := checkEntryName(e.Name); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	if _, err := e.validate(); err != nil {
		return fmt.Errorf("schedule: %q: %w", e.Name, err)
	}
	return nil
}

// checkEntryName checks an entry's name: a lease key's rules, at most
// MaxNameLen bytes.
func checkEntryName(name string) error {
	if err := driver.CheckKey(name); err != nil {
		return fmt.Errorf("Entry.Name: %w", err)
	}
	if len(name) > MaxNameLen {
		return invalid("Entry.Name is %d bytes, at most %d are allowed", len(name), MaxNameLen)
	}
	return nil
}

// validate checks e as Put receives it and fills its defaults. Errors name
// the field.
func (e Entry) validate() (Entry, error) {
	if e.Cron != "" && e.Every != 0 {
		return e, invalid("set one of Entry.Cron and Entry.Every, not both")
	}
	if e.Cron == "" && e.Every == 0 {
		return e, invalid("set one of Entry.Cron and Entry.Every")
	}
	if e.Cron != "" {
		c := strings.TrimSpace(e.Cron)
		if up := strings.ToUpper(c); strings.HasPrefix(up, "TZ=") || strings.HasPrefix(up, "CRON_TZ=") {
			return e, invalid("Entry.Cron %q: give the zone in Entry.TZ, not in the spec", e.Cron)
		}
		if strings.HasPrefix(c, "@every") {
			return e, invalid("Entry.Cron %q: give an interval in Entry.Every", e.Cron)
		}
		if e.TZ != "" {
			if _, err := time.LoadLocation(e.TZ); err != nil || e.TZ == "Local" {
				return e, invalid("Entry.TZ %q is not an IANA time zone (such as Europe/Berlin)", e.TZ)
			}
		}
	} else if e.TZ != "" {
		return e, invalid("Entry.TZ is for a cron spec; an interval (Entry.Every) has no zone")
	}
	spec, tz := e.storedSpec()
	if e.Cron != "" {
		// The spec as the caller wrote it, without the zone: the error
		// quotes it.
		if _, err := ParseCron(spec); err != nil {
			return e, invalid("Entry.Cron: %w", err)
		}
	}
	sched, err := parseStored(spec, tz)
	if err != nil {
		field := "Entry.Cron"
		if e.Every != 0 {
			field = "Entry.Every"
		}
		return e, invalid("%s: %w", field, err)
	}
	if e.Every != 0 {
		if err := Every(e.Every).validate(); err != nil {
			return e, invalid("Entry.Every: %w", err)
		}
	}
	if err := driver.CheckKey(e.Handler); err != nil {
		return e, invalid("Entry.Handler: %w", err)
	}
	if len(e.Handler) > MaxNameLen {
		return e, invalid("Entry.Handler is %d bytes, at most %d are allowed", len(e.Handler), MaxNameLen)
	}
	if len(e.Args) == 0 {
		e.Args = json.RawMessage("{}")
	}
	switch {
	case len(e.Args) > MaxArgsLen:
		return e, invalid("Entry.Args is %d bytes, at most %d are allowed", len(e.Args), MaxArgsLen)
	case !utf8.Valid(e.Args):
		// json.Valid takes any bytes in a string; PostgreSQL does not.
		return e, invalid("Entry.Args %.40q is not valid UTF-8", e.Args)
	case !json.Valid(e.Args):
		return e, invalid("Entry.Args %.40q is not JSON", e.Args)
	}
	// The policies are Job's: check them as a lease-mode job does (no
	// mode's rules: lease mode is the most permissive; a replica in another
	// mode reports what it cannot run when it binds the schedule).
	j, _, err := e.job(sched, nil).validate(nil)
	if err != nil {
		// Job's messages name Job's fields, which are Entry's.
		return e, invalid("%s", strings.TrimPrefix(strings.ReplaceAll(err.Error(), "Job.", "Entry."), "aegis: invalid argument: "))
	}
	for _, d := range []struct {
		field string
		d     time.Duration
	}{{"StartingDeadline", j.StartingDeadline}, {"LockAtMostFor", j.LockAtMostFor}, {"LockAtLeastFor", j.LockAtLeastFor}} {
		if d.d%time.Millisecond != 0 {
			return e, invalid("Entry.%s %s is not a whole number of milliseconds, which the catalog stores", d.field, d.d)
		}
	}
	e.Misfire, e.CatchUpMax, e.Overlap, e.MaxAttempts = j.Misfire, j.CatchUpMax, j.Overlap, j.MaxAttempts
	e.LockAtMostFor, e.StartingDeadline = j.LockAtMostFor, j.StartingDeadline
	e.Args = slices.Clip(e.Args)
	return e, nil
}

// job is the entry as a Job firing on s (the entry's spec, parsed) and
// running run (nil for validation only).
func (e Entry) job(s Schedule, run func(context.Context) error) Job {
	if run == nil {
		run = func(context.Context) error { return nil }
	}
	return Job{
		Name: e.Name, Schedule: s, Run: run,
		LockAtMostFor: e.LockAtMostFor, LockAtLeastFor: e.LockAtLeastFor, DisableKeepAlive: e.DisableKeepAlive,
		StartingDeadline: e.StartingDeadline, Misfire: e.Misfire, CatchUpMax: e.CatchUpMax,
		Overlap: e.Overlap, MaxAttempts: e.MaxAttempts,
	}
}

// ParseMisfire parses a misfire policy as Misfire.String writes it.
func ParseMisfire(s string) (Misfire, error) {
	for _, m := range []Misfire{MisfireFireOnce, MisfireSkip, MisfireCatchUp} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, invalid("misfire policy %q: want fire-once, skip or catch-up", s)
}

// ParseOverlap parses an overlap policy as Overlap.String writes it.
func ParseOverlap(s string) (Overlap, error) {
	for _, o := range []Overlap{OverlapForbid, OverlapReplace, OverlapAllow} {
		if s == o.String() {
			return o, nil
		}
	}
	return 0, invalid("overlap policy %q: want forbid, replace or allow", s)
}
