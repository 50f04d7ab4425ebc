package schedule

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// row is a catalog row as the binder and the claims use it.
type row struct {
	name, spec, tz       string
	prevSpec, prevTZ     sql.NullString
	effectiveMS          int64
	resumedMS            int64
	handler              string
	args                 string
	enabled              bool
	misfire, overlap     string
	deadlineMS, mostMS   int64
	leastMS              int64
	catchUp, attempts    int
	version              int64
	createdMS, updatedMS int64
	keepAlive            bool
	runNowMS             sql.NullInt64 // the latest RunNow's fire time
	readMS               int64         // the store's time when the row was read
}

func (r *row) scan(sc interface{ Scan(...any) error }) error {
	return sc.Scan(&r.name, &r.spec, &r.tz, &r.prevSpec, &r.prevTZ, &r.effectiveMS, &r.resumedMS, &r.handler, &r.args, &r.enabled,
		&r.misfire, &r.overlap, &r.deadlineMS, &r.catchUp, &r.attempts, &r.mostMS, &r.leastMS, &r.version, &r.createdMS, &r.updatedMS, &r.keepAlive,
		&r.runNowMS, &r.readMS)
}

// entry converts a row. A row this program cannot read (written by a newer
// one) is an error naming the schedule. It parses the spec of an interval
// only (Entry.Every is its period): a cron spec is the entry's as text.
func (r *row) entry(ns string) (Entry, error) {
	var (
		next Schedule
		err  error
	)
	if r.tz == "" {
		next, err = parseStored(r.spec, r.tz)
	}
	return r.entryOf(ns, next, err)
}

// parsed is the row's entry and its spec parsed, once, for a binder: a
// spec this program cannot parse is an error (after entry's own).
func (r *row) parsed(ns string) (Entry, Schedule, error) {
	next, parseErr := parseStored(r.spec, r.tz)
	e, err := r.entryOf(ns, next, parseErr)
	if err == nil {
		err = parseErr
	}
	return e, next, err
}

// entryOf converts a row whose spec parsed as next (or failed with
// parseErr); only an interval's is read.
func (r *row) entryOf(ns string, next Schedule, parseErr error) (Entry, error) {
	e := Entry{
		Name: r.name, Handler: r.handler, Args: json.RawMessage(r.args), Namespace: ns, Paused: !r.enabled,
		StartingDeadline: time.Duration(r.deadlineMS) * time.Millisecond, CatchUpMax: r.catchUp, MaxAttempts: r.attempts,
		LockAtMostFor: time.Duration(r.mostMS) * time.Millisecond, LockAtLeastFor: time.Duration(r.leastMS) * time.Millisecond,
		DisableKeepAlive: !r.keepAlive, Version: r.version, EffectiveAt: time.UnixMilli(r.effectiveMS).UTC(),
		Created: time.UnixMilli(r.createdMS).UTC(), Updated: time.UnixMilli(r.updatedMS).UTC(),
	}
	if r.tz == "" {
		iv, ok := next.(Interval)
		if parseErr != nil || !ok {
			return e, fmt.Errorf("schedule: catalog row %q: spec %q is not an interval", r.name, r.spec)
		}
		e.Every = iv.Period
	} else {
		e.Cron, e.TZ = r.spec, r.tz
	}
	if r.prevSpec.Valid {
		e.Previous = specText(r.prevSpec.String, r.prevTZ.String)
	}
	if r.resumedMS != 0 {
		e.Resumed = time.UnixMilli(r.resumedMS).UTC()
	}
	if r.runNowMS.Valid {
		e.RunNow = time.UnixMilli(r.runNowMS.Int64).UTC()
	}
	var err error
	if e.Misfire, err = ParseMisfire(r.misfire); err != nil {
		return e, fmt.Errorf("schedule: catalog row %q: %w", r.name, err)
	}
	if e.Overlap, err = ParseOverlap(r.overlap); err != nil {
		return e, fmt.Errorf("schedule: catalog row %q: %w", r.name, err)
	}
	return e, nil
}

// schedule is the row's fire times: Previous before EffectiveAt, the spec
// (parsed: next) from it.
func (r *row) schedule(next Schedule) (switched, error) {
	var err error
	sw := switched{next: next, nextSpec: r.spec, nextTZ: r.tz, at: time.UnixMilli(r.effectiveMS).UTC(), from: time.UnixMilli(r.resumedMS).UTC()}
	if r.prevSpec.Valid {
		if sw.prev, err = parseStored(r.prevSpec.String, r.prevTZ.String); err != nil {
			return switched{}, err
		}
		sw.prevSpec, sw.prevTZ = r.prevSpec.String, r.prevTZ.String
	}
	return sw, nil
}

// switched follows prev before at and next from at: a catalog schedule
// around an edit; it has no tick before from (the last resume). Every
// replica reads both instants from the row, so they all fire the same
// ticks.
type switched struct {
	prev, next       Schedule // prev nil: no ticks before at
	prevSpec, prevTZ string
	nextSpec, nextTZ string
	at, from         time.Time
}

func (s switched) Next(t time.Time) time.Time {
	if t.Before(s.from) {
		t = s.from.Add(-time.Nanosecond) // the first tick at or after the resume
	}
	if t.Before(s.at) {
		if s.prev != nil {
			if n := s.prev.Next(t); !n.IsZero() && n.Before(s.at) {
				return n
			}
		}
		t = s.at.Add(-time.Nanosecond) // the next spec's first tick at or after at
	}
	return s.next.Next(t)
}

// specAt is the spec and zone that fire time f follows: what a claim sends
// for the row to check.
func (s switched) specAt(f time.Time) (spec, tz string) {
	if f.Before(s.at) {
		return s.prevSpec, s.prevTZ
	}
	return s.nextSpec, s.nextTZ
}
