package lab

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// auditRow is a row of aegis_lab_audit.
type auditRow struct {
	Attempt string
	Tick    int
	Node    int
	Token   int64
	Status  string
	Value   sql.NullInt64
	AtMS    int64
}

// checkTimeout bounds the linearizability check; past it the verdict is
// unknown.
const checkTimeout = 20 * time.Second

// buildReport reads what reached the store and puts the report together.
func (r *Run) buildReport() (*Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, auditRowsSQL, r.ID)
	if err != nil {
		return nil, fmt.Errorf("lab: read the audit rows: %w", err)
	}
	var audit []auditRow
	for rows.Next() {
		var a auditRow
		if err := rows.Scan(&a.Attempt, &a.Tick, &a.Node, &a.Token, &a.Status, &a.Value, &a.AtMS); err != nil {
			rows.Close()
			return nil, fmt.Errorf("lab: read the audit rows: %w", err)
		}
		audit = append(audit, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lab: read the audit rows: %w", err)
	}
	var balance int64
	if err := r.db.QueryRowContext(ctx, readBalanceSQL, r.ID).Scan(&balance); err != nil {
		return nil, fmt.Errorf("lab: read the balance: %w", err)
	}

	// What the store says was committed, by attempt and by tick.
	committed := map[string]bool{}
	executedPerTick := map[int]int{}
	var effects int64
	for _, a := range audit {
		if a.Status != "EXECUTED" {
			continue
		}
		committed[a.Attempt] = true
		executedPerTick[a.Tick]++
		effects++
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	// A run ends when its nodes are done, often before the last ticks'
	// windows close: their missed events, which the report counts, come
	// now, so that the events (and a picture drawn from them) agree.
	ticks := r.cfg.Ticks()
	if r.stopped {
		ticks = min(ticks, r.fired) // as the counts below
	}
	for t := 1; t <= ticks; t++ {
		if executedPerTick[t] == 0 && !r.missed[t] {
			r.missed[t] = true
			r.addLocked(Event{T: r.secs(time.Now().UnixNano()), Kind: EventMissed, Tick: t})
		}
	}
	rep := &Report{
		Scenario:  r.cfg.Scenario,
		Strategy:  r.cfg.Strategy,
		Fenced:    r.cfg.fenced(),
		Nodes:     r.cfg.Nodes,
		DurationS: r.cfg.Duration.Seconds(),
		Ticks:     r.cfg.Ticks(),
		Events:    slices.Clone(r.events),
		Config:    r.cfg,
		Balance:   balance,
		Notes:     slices.Clone(r.notes),
	}
	if rep.Events == nil {
		rep.Events = []Event{}
	}
	if r.stopped && r.fired < rep.Ticks {
		rep.Notes = append(rep.Notes, fmt.Sprintf("stopped early: %d of %d ticks fired; the counts cover those", r.fired, rep.Ticks))
		rep.Ticks = r.fired
	}

	var attempts []Attempt
	enteredPerTick := map[int]int{}
	for _, id := range r.order {
		a, ok := r.attempts[id]
		if !ok {
			continue // skipped: the tick was done
		}
		if committed[id] && a.Outcome != Committed {
			// Committed, but the node never said so (killed right after,
			// or a commit whose answer was lost).
			a.Outcome, a.Return = Committed, math.MaxInt64
		}
		if a.Read >= 0 {
			enteredPerTick[a.Tick]++
			rep.Executions++
		}
		if a.Outcome == Refused {
			rep.StaleRejected++
		}
		attempts = append(attempts, *a)
	}
	for t := 1; t <= rep.Ticks; t++ {
		if enteredPerTick[t] > 1 {
			rep.DuplicateTicks++
		}
		if executedPerTick[t] > 1 {
			rep.DuplicatesApplied++
		}
		if executedPerTick[t] == 0 {
			rep.MissedTicks++
		}
	}
	rep.LostUpdates = effects - balance
	rep.Attempts = attempts
	rep.Table = tickTable(rep.Ticks, r.cfg.Nodes, attempts)

	html := ""
	if r.cfg.OutDir != "" {
		html = filepath.Join(r.cfg.OutDir, "aegis-lab-"+r.ID+".html")
	}
	rep.Checker, err = CheckHistory(attempts, r.cfg.fenced() && r.strat.Token == LeaseToken, checkTimeout, html)
	if err != nil {
		rep.Notes = append(rep.Notes, err.Error())
	} else if rep.Checker == CheckViolation && html != "" {
		if _, statErr := os.Stat(html); statErr == nil {
			rep.Visualisation = html
		}
	}
	return rep, nil
}

// tickTable is the per-tick table: for each tick, what each node's
// attempts came to.
func tickTable(ticks, nodes int, attempts []Attempt) []TickRow {
	rows := make([]TickRow, ticks)
	for i := range rows {
		rows[i] = TickRow{Tick: i + 1, Cells: make([]string, nodes)}
	}
	executed := make([]int, ticks)
	refused := make([]int, ticks)
	for _, a := range attempts {
		if a.Tick < 1 || a.Tick > ticks || a.Node < 1 || a.Node > nodes {
			continue
		}
		cell := ""
		switch a.Outcome {
		case Committed:
			cell = "EXEC"
			executed[a.Tick-1]++
		case Refused:
			cell = "STALE"
			refused[a.Tick-1]++
		default:
			if a.Read < 0 {
				continue
			}
			cell = "ENTER"
		}
		if a.Token != 0 {
			cell += fmt.Sprintf(" t%d", a.Token)
		}
		row := &rows[a.Tick-1]
		if prev := row.Cells[a.Node-1]; prev != "" {
			cell = prev + ", " + cell
		}
		row.Cells[a.Node-1] = cell
	}
	for i := range rows {
		var note []string
		switch {
		case executed[i] == 0:
			note = append(note, "missed")
		case executed[i] > 1:
			note = append(note, fmt.Sprintf("DUPLICATE: applied %d times", executed[i]))
		}
		if refused[i] > 0 {
			note = append(note, fmt.Sprintf("fence refused %d", refused[i]))
		}
		for _, n := range note {
			if rows[i].Note != "" {
				rows[i].Note += "; "
			}
			rows[i].Note += n
		}
	}
	return rows
}
