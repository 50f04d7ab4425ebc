package console

import (
	"context"
	"time"
)

// fenceCards are the overview's cards of the fence.
type fenceCards struct {
	Resources int
	// Log: the refusal log is there. Hour and Day count its refusals in
	// the last hour and day; Last is the newest refusal, its writer named.
	Log       bool
	Hour, Day int64
	// HourMore, DayMore: the log may have pruned more of the window (a
	// resource's newest LogKept all fall in it): "at least".
	HourMore, DayMore bool
	Last              *refusalRow
}

func (s *Server) fenceCards(ctx context.Context, now time.Time) (fenceCards, error) {
	var d fenceCards
	ok, refusals, err := s.st.fences.Tables(ctx, s.st.db)
	if err != nil || !ok {
		return d, err
	}
	fs, err := s.st.fence(ctx, refusals)
	if err != nil {
		return d, err
	}
	d.Resources = len(fs)
	if d.Log, err = s.st.fences.LogTable(ctx, s.st.db); err != nil || !d.Log {
		return d, err
	}
	if d.Hour, d.HourMore, err = s.st.fences.CountRefusalsSince(ctx, s.st.db, now.Add(-refusalHour)); err != nil {
		return d, err
	}
	if d.Day, d.DayMore, err = s.st.fences.CountRefusalsSince(ctx, s.st.db, now.Add(-refusalDay)); err != nil {
		return d, err
	}
	last, err := s.refusals(ctx, nil, 1)
	if err != nil {
		return d, err
	}
	if len(last) > 0 {
		d.Last = &last[0]
	}
	return d, nil
}
