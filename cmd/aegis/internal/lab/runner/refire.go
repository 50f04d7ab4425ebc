package runner

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
)

// A re-fire is a tick run again after it had succeeded: a critical section
// of a job's tick that committed, and that entered (began its read) after
// another section of the same tick had committed. Two sections of a tick
// at once are a duplicate and not a re-fire; a re-fire that committed is a
// duplicate too, the kind that failovers and restarts cause: a new leader,
// a promoted store or a restarted replica that forgets what ran. A
// re-fire is retried when it shares its run attempt with none of the
// commits before it (a reaper's retry of a run whose end was lost after
// its commit, or the run it retried), and fresh otherwise (a second run of
// one attempt: a lease granted again, a run key claimed again).
//
// Its times are the audit row's: entered_ms, the section's enter, and
// at_ms, stamped in its write transaction before the commit. The store
// counts re-fires with them (lab.StoreRefiresSQL; refiresOf over the rows
// read), and the nodes report the same instants in their events (enter's
// time, executed's stamp), so that the run's record counts them too
// (recordRefires) and the two must agree.

// refireCount is a job's re-fires, and how many of them were retried.
type refireCount struct{ all, retried int }

// refiresOf counts the re-fires among the EXECUTED rows of one job.
func refiresOf(executions map[jobTick][]auditRow, job string) refireCount {
	var c refireCount
	for jt, rows := range executions {
		if jt.Job != job {
			continue
		}
		for _, t := range rows {
			refire, fresh := false, false
			for _, s := range rows {
				if s.Attempt != t.Attempt && s.AtMS < t.EnteredMS {
					refire = true
					fresh = fresh || s.RunAttempt == t.RunAttempt
				}
			}
			if refire {
				c.all++
				if !fresh {
					c.retried++
				}
			}
		}
	}
	return c
}

// recordBand is what a run's record says of a job's re-fires: certain
// ones, and uncertain ones the record cannot decide (a section whose write
// began and never reported its outcome may have committed, at a time the
// record does not have; a commit found by a retry was stamped at some
// point of its write). The store's count must lie in [certain, certain +
// uncertain].
type recordBand struct{ certain, uncertain int }

func (b recordBand) holds(n int) bool { return b.certain <= n && n <= b.certain+b.uncertain }

// commitSpan is when a section's EXECUTED row was stamped, as far as the
// record knows, in Unix ms: from lo to hi.
type commitSpan struct {
	lo, hi int64
	sure   bool // it committed; else it may have
}

// span returns when s's commit was stamped, and false when s did not
// commit (it was refused, or never wrote).
func (s *sectionRecord) span() (commitSpan, bool) {
	ms := func(ns int64) int64 { return ns / int64(time.Millisecond) }
	switch {
	case s.WriteCall == 0 || s.WriteResult == checker.OpRefused || s.ReadResult != checker.OpOK:
		return commitSpan{}, false
	case s.WriteResult == checker.OpOK && s.Stamp != 0:
		return commitSpan{s.Stamp, s.Stamp, true}, true
	case s.WriteResult == checker.OpOK:
		return commitSpan{ms(s.WriteCall), ms(s.WriteReturn), true}, true
	}
	// Its write began, and never said how it ended.
	return commitSpan{ms(s.WriteCall), math.MaxInt64, false}, true
}

// recordRefires counts a job's re-fires from its sections, as the nodes
// reported them.
func recordRefires(sections []*sectionRecord) recordBand {
	byTick := map[int][]*sectionRecord{}
	for _, s := range sections {
		byTick[s.Tick] = append(byTick[s.Tick], s)
	}
	var b recordBand
	for _, secs := range byTick {
		for _, t := range secs {
			tc, ok := t.span()
			if !ok {
				continue
			}
			entered := t.ReadCall / int64(time.Millisecond)
			surely, maybe := false, false
			for _, s := range secs {
				sc, ok := s.span()
				if !ok || s.ID == t.ID {
					continue
				}
				surely = surely || (sc.sure && sc.hi < entered)
				maybe = maybe || sc.lo < entered
			}
			switch {
			case surely && tc.sure:
				b.certain++
			case maybe:
				b.uncertain++
			}
		}
	}
	return b
}

// readRefires reads the store's count of each job's re-fires.
func readRefires(ctx context.Context, db *sql.DB, run string) (map[string]refireCount, error) {
	rows, err := db.QueryContext(ctx, lab.StoreRefiresSQL, run)
	if err != nil {
		return nil, fmt.Errorf("lab: count the re-fires: %w", err)
	}
	defer rows.Close()
	out := map[string]refireCount{}
	for rows.Next() {
		var job string
		var c refireCount
		if err := rows.Scan(&job, &c.all, &c.retried); err != nil {
			return nil, fmt.Errorf("lab: count the re-fires: %w", err)
		}
		out[job] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lab: count the re-fires: %w", err)
	}
	return out, nil
}

// judgeRefires compares a job's re-fires in the store (jr's, from its
// audit rows), SQL's count and the record's, and returns the disagreement
// in words ("" when they agree).
func judgeRefires(jr *lab.JobReport, sqlCount refireCount, record recordBand) string {
	switch {
	case sqlCount.all != jr.Refires || sqlCount.retried != jr.RetriedRefires:
		return fmt.Sprintf("%s: the audit rows count %d re-fires (%d retried), SQL %d (%d)", jr.Name, jr.Refires, jr.RetriedRefires, sqlCount.all, sqlCount.retried)
	case !record.holds(jr.Refires):
		return fmt.Sprintf("%s: the store shows %d re-fires, the nodes' events %d (and %d they cannot decide)", jr.Name, jr.Refires, record.certain, record.uncertain)
	}
	return ""
}
