package lab

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aegislab/aegis/schedule"
)

// edit applies an edit fault to the run's catalog, as an operator would
// (aegis schedule put/pause/resume): every node's binder picks it up.
func (r *Run) edit(ctx context.Context, ch Chaos) error {
	var (
		e   schedule.Entry
		err error
	)
	rec := catalogEdit{Job: ch.Target}
	if j, ok := ch.added(); ok {
		return r.addJob(ctx, ch, j)
	}
	switch ch.Spec {
	case "pause", "resume":
		paused := ch.Spec == "pause"
		rec.Paused = &paused
		if paused {
			e, err = r.catalog.Pause(ctx, ch.Target)
		} else {
			e, err = r.catalog.Resume(ctx, ch.Target)
		}
		rec.At = time.Now() // from the next tick claimed
	default:
		if e, err = r.catalog.Get(ctx, ch.Target); err == nil {
			e.Every, e.Cron = ch.Offset, ""
			e, err = r.catalog.Put(ctx, e)
		}
		rec.At, rec.Every = e.EffectiveAt, ch.Offset
	}
	if err != nil {
		return fmt.Errorf("edit %s: %w", ch.Target, err)
	}
	r.mu.Lock()
	r.edits = append(r.edits, rec)
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventChaos, Job: ch.Target, Detail: fmt.Sprintf("%s: the catalog's %s is now %s%s, from %+.1fs (version %d)",
		ch, ch.Target, e.Spec(), map[bool]string{true: ", paused", false: ""}[e.Paused], r.secs(rec.At.UnixNano()), e.Version)})
	return nil
}

// addJob adds j to the run's catalog, as an operator would (aegis
// schedule put): its ledger row first, then its catalog row, which every
// node's binder picks up and runs from the row's effective time. From
// then on the lab expects its ticks, checks it and counts it.
func (r *Run) addJob(ctx context.Context, ch Chaos, j JobSpec) error {
	r.mu.Lock()
	exists := slices.ContainsFunc(r.jobs, func(x JobSpec) bool { return x.Name == j.Name })
	r.mu.Unlock()
	if exists {
		return fmt.Errorf("edit %s: the job is in the catalog already", ch.Target)
	}
	if _, err := r.db.ExecContext(ctx, insertLedgerSQL, r.ID, j.Name); err != nil {
		return fmt.Errorf("edit %s: its ledger: %w", ch.Target, err)
	}
	e, err := r.catalog.Put(ctx, j.entry(r.cfg))
	if err != nil {
		return fmt.Errorf("edit %s: %w", ch.Target, err)
	}
	r.mu.Lock()
	r.jobs = append(r.jobs, j)
	r.edits = append(r.edits, catalogEdit{Job: j.Name, At: e.EffectiveAt, Every: j.Every, Added: true})
	r.mu.Unlock()
	r.labEvent(Event{Kind: EventChaos, Job: j.Name, Detail: fmt.Sprintf("%s: %s added to the catalog, %s working %s%s, from %+.3fs (version %d)",
		ch, j.Name, e.Spec(), j.Work, map[bool]string{true: ", without keep-alive", false: ""}[j.NoKeepAlive], r.secs(e.EffectiveAt.UnixNano()), e.Version)})
	return nil
}
