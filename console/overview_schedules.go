package console

import (
	"context"
	"errors"
	"time"

	"github.com/aegislab/aegis/schedule"
)

// schedCards are the overview's cards of the schedules.
type schedCards struct {
	Schedules, Paused, Stuck int
	StuckMore                bool // more stuck runs than the overview read
	// Unbound are the schedules whose handler no live replica has (none
	// runs them); SomeLack those that some live replicas lack while
	// others run them.
	Unbound, SomeLack int
	Unreadable        int // catalog rows the catalog cannot read
	NoCatalog         bool
	// Hour and Day are the attempt history's harm and trouble in the last
	// hour and day; NoAttempts is the attempt table when it is missing.
	Hour, Day  schedule.AttemptCounts
	NoAttempts string
	// RunTable: the schedule's run table is there. Missed are the missed
	// ticks of the last hour by schedule, the most missed first, and
	// MissedTotal their sum (at least, with MissedMore: the overview
	// counts the latest missedScanned); NoMissed is the missed table when
	// it is missing (an old database's).
	RunTable    bool
	Missed      []missedCount
	MissedTotal int
	MissedMore  bool
	NoMissed    string
}

// missedWindow is how far back the overview counts missed ticks.
const missedWindow = time.Hour

// scheduleCounts fills the overview's counts of the schedules: the
// catalog's, the stuck runs, the attempts' harm and trouble of the last
// hour and day, the last hour's missed ticks.
func (s *Server) schedCards(ctx context.Context, now time.Time) (schedCards, error) {
	var d schedCards
	return d, s.scheduleCounts(ctx, now, &d)
}

func (s *Server) scheduleCounts(ctx context.Context, now time.Time, d *schedCards) error {
	cat, err := s.st.catalog(ctx)
	if err != nil {
		return err
	}
	if cat != nil {
		es, err := cat.List(ctx)
		var bad *schedule.BadRowsError
		switch {
		case errors.As(err, &bad):
			d.Unreadable = len(bad.Rows) // the rest are counted
		case err != nil && !errors.Is(err, schedule.ErrNotFound):
			return err
		}
		d.Schedules = len(es)
		for _, e := range es {
			if e.Paused {
				d.Paused++
			}
			switch {
			case scheduleRow{Entry: e}.Unbound():
				d.Unbound++
			case len(e.MissingOn) > 0:
				d.SomeLack++
			}
		}
	} else {
		d.NoCatalog = true
	}
	if ok, err := s.st.runTable.Exists(ctx); err != nil || !ok {
		return err
	}
	stuck, more, err := s.st.stuck(ctx, "")
	if err != nil {
		return err
	}
	d.Stuck, d.StuckMore = len(stuck), more
	d.RunTable = true
	if ok, err := s.st.exists(ctx, attemptTable); err != nil {
		return err
	} else if !ok {
		d.NoAttempts = attemptTable
	} else {
		if d.Hour, err = s.st.runTable.Counts(ctx, now.Add(-time.Hour)); err != nil {
			return err
		}
		if d.Day, err = s.st.runTable.Counts(ctx, now.Add(-24*time.Hour)); err != nil {
			return err
		}
	}
	counts, more, found, err := s.st.missedSince(ctx, now.Add(-missedWindow))
	if err != nil {
		return err
	}
	if !found {
		d.NoMissed = missedTable
	}
	d.Missed, d.MissedMore = counts, more
	for _, c := range counts {
		d.MissedTotal += c.N
	}
	return nil
}
