package runner

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/schedule"
)

// edit applies an edit fault to the run's catalog, as an operator would
// (aegis schedule put/pause/resume): every node's binder picks it up.
func (r *Run) edit(ctx context.Context, ch lab.Chaos) error {
	var (
		e   schedule.Entry
		err error
	)
	rec := lab.CatalogEdit{Job: ch.Target}
	if j, ok := ch.Added(); ok {
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
	r.labEvent(lab.Event{Kind: lab.EventChaos, Job: ch.Target, Detail: fmt.Sprintf("%s: the catalog's %s is now %s%s, from %+.1fs (version %d)",
		ch, ch.Target, e.Spec(), map[bool]string{true: ", paused", false: ""}[e.Paused], r.secs(rec.At.UnixNano()), e.Version)})
	return nil
}

// addJob adds j to the run's catalog, as an operator would (aegis
// schedule put): its ledger row first, then its catalog row, which every
// node's binder picks up and runs from the row's effective time. From
// then on the lab expects its ticks, checks it and counts it.
func (r *Run) addJob(ctx context.Context, ch lab.Chaos, j lab.JobSpec) error {
	r.mu.Lock()
	exists := slices.ContainsFunc(r.jobs, func(x lab.JobSpec) bool { return x.Name == j.Name })
	r.mu.Unlock()
	if exists {
		return fmt.Errorf("edit %s: the job is in the catalog already", ch.Target)
	}
	if _, err := r.db.ExecContext(ctx, lab.InsertLedgerSQL, r.ID, j.Name); err != nil {
		return fmt.Errorf("edit %s: its ledger: %w", ch.Target, err)
	}
	e, err := r.catalog.Put(ctx, j.Entry(r.cfg))
	if err != nil {
		return fmt.Errorf("edit %s: %w", ch.Target, err)
	}
	r.mu.Lock()
	r.jobs = append(r.jobs, j)
	r.edits = append(r.edits, lab.CatalogEdit{Job: j.Name, At: e.EffectiveAt, Every: j.Every, Added: true})
	r.mu.Unlock()
	r.labEvent(lab.Event{Kind: lab.EventChaos, Job: j.Name, Detail: fmt.Sprintf("%s: %s added to the catalog, %s working %s%s, from %+.3fs (version %d)",
		ch, j.Name, e.Spec(), j.Work, map[bool]string{true: ", without keep-alive", false: ""}[j.NoKeepAlive], r.secs(e.EffectiveAt.UnixNano()), e.Version)})
	return nil
}
