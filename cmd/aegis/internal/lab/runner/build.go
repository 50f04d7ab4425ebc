package runner

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
	"github.com/aegislab/aegis/schedule"
)

// auditRow is a row of aegis_lab_audit.
type auditRow struct {
	Attempt    string
	Job        string
	Tick       int
	Node       int
	Token      int64
	Owner      string
	RunAttempt int
	Status     string
	Value      sql.NullInt64
	AtMS       int64
	EnteredMS  int64
}

// checkTimeout bounds each job's linearizability check; past it the job's
// verdict is unknown.
const checkTimeout = 20 * time.Second

// buildReport reads what reached the store and puts the report together:
// per job, the counts from the audit rows, the checker's verdict over the
// nodes' history, and the store's own account of the harm, which the
// verdict must agree with.
func (r *Run) buildReport() (*lab.Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := r.readStore(ctx)
	if err != nil {
		return nil, err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	fires := r.firesLocked(st.executions)
	rep := r.newReportLocked()
	ops, sections := r.historyLocked(st.committed, rep.Fenced)
	htmlDir := ""
	if r.cfg.OutDir != "" {
		htmlDir = filepath.Join(r.cfg.OutDir, "aegis-lab-"+r.ID) // a page per violating job
	}
	verdicts, err := checker.CheckJobs(ops, r.fenceRule(), checkTimeout, htmlDir)
	if err != nil {
		rep.Notes = append(rep.Notes, err.Error())
	}
	verdict := map[string]checker.JobVerdict{}
	for _, v := range verdicts {
		verdict[v.Job] = v
	}
	for _, j := range r.jobs {
		jr := r.jobReportLocked(j, fires[j.Name], st, sections)
		if v, ok := verdict[j.Name]; ok {
			jr.Checker, jr.Reason, jr.Visualisation = v.Verdict, v.Reason, v.HTML
		}
		r.judge(&jr, st.duplicates[j.Name], st.lost[j.Name], rep)
		r.judgeRefiresLocked(&jr, st.refires[j.Name], rep)
		rep.Add(jr)
	}
	if r.cfg.Standby > 0 {
		rep.Notes = append(rep.Notes, r.standbyNoteLocked(sections, st))
	}
	rep.Table = tickTable(r.cfg.Nodes, r.jobs, fires, slices.Collect(maps.Values(sections)))
	rep.Conclude(r.configExits, r.unapplied) // after the table: it counts the ticks entered and refused
	if s, ok := lab.LookupStrategy(r.cfg.Strategy); ok {
		excluded := s.Excludes(r.cfg)
		for _, h := range rep.Harms {
			if slices.Contains(excluded, h) {
				rep.Unsafe = append(rep.Unsafe, h)
			}
		}
	}
	return rep, nil
}

// storeAccount is what the store says of a run: its audit rows, each
// job's ledger and the store's own counts of duplicates and lost updates,
// and, from the audit, what was committed, by attempt and by job tick.
type storeAccount struct {
	ledgers    map[string]int64
	duplicates map[string]int
	lost       map[string]int64
	committed  map[string]bool // by attempt
	executions map[jobTick][]auditRow
	refires    map[string]refireCount
}

// readStore reads the store's account of the run.
func (r *Run) readStore(ctx context.Context) (*storeAccount, error) {
	audit, err := readAudit(ctx, r.db, r.ID)
	if err != nil {
		return nil, err
	}
	st := &storeAccount{committed: map[string]bool{}, executions: map[jobTick][]auditRow{}}
	if st.ledgers, err = readCounts[int64](ctx, r.db, lab.LedgersSQL, r.ID); err != nil {
		return nil, fmt.Errorf("lab: read the ledgers: %w", err)
	}
	if st.duplicates, err = readCounts[int](ctx, r.db, lab.StoreDuplicatesSQL, r.ID); err != nil {
		return nil, fmt.Errorf("lab: count the duplicates: %w", err)
	}
	if st.lost, err = readCounts[int64](ctx, r.db, lab.StoreLostSQL, r.ID); err != nil {
		return nil, fmt.Errorf("lab: count the lost updates: %w", err)
	}
	if st.refires, err = readRefires(ctx, r.db, r.ID); err != nil {
		return nil, err
	}
	for _, a := range audit {
		if a.Status == "EXECUTED" {
			st.committed[a.Attempt] = true
			jt := jobTick{a.Job, a.Tick}
			st.executions[jt] = append(st.executions[jt], a)
		}
	}
	return st, nil
}

// firesLocked returns each job's fired ticks. A run ends when its nodes
// are done, often before the last ticks' windows close: their missed
// events come now, so that the events (and a picture drawn from them)
// agree with the counts.
func (r *Run) firesLocked(executions map[jobTick][]auditRow) map[string][]int {
	ticks := r.cfg.Ticks()
	if r.stopped {
		ticks = min(ticks, r.fired)
	}
	fires := map[string][]int{}
	for _, j := range r.jobs {
		for _, t := range j.Fires(r.start, r.cfg.Tick, ticks, r.edits) {
			fires[j.Name] = append(fires[j.Name], t)
			if len(executions[jobTick{j.Name, t}]) == 0 {
				r.missLocked(jobTick{j.Name, t})
			}
		}
	}
	// A tick executed is a tick fired, whatever the lab expected (an
	// edit's new cadence, a tick at the edge of a stopped run).
	for jt := range executions {
		if !slices.Contains(fires[jt.Job], jt.Tick) {
			fires[jt.Job] = append(fires[jt.Job], jt.Tick)
			slices.Sort(fires[jt.Job])
		}
	}
	return fires
}

// newReportLocked is the report before its jobs: the run's config, its
// events and its notes.
func (r *Run) newReportLocked() *lab.Report {
	rep := &lab.Report{
		Scenario: r.cfg.Scenario, Strategy: r.cfg.Strategy, Fenced: r.cfg.Fenced(), Nodes: r.cfg.Nodes,
		DurationS: r.cfg.Duration.Seconds(), Run: r.ID, ConfigJSON: r.cfg.JSON(), Config: r.cfg,
		Events: slices.Clone(r.events), Notes: slices.Clone(r.notes), Harms: []lab.Harm{}, Unsafe: []lab.Harm{}, StoreAgrees: true,
	}
	if rep.Events == nil {
		rep.Events = []lab.Event{}
	}
	if rep.Notes == nil {
		rep.Notes = []string{}
	}
	if !r.serverFault {
		for _, np := range r.nodes {
			if np.late > 0 && !np.faulted {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s node%d: a tick it could not start was %s past its fire time, and no fault was aimed at it or its servers; its dropped ticks count as missed",
					lab.MachineLate, np.n, np.late.Round(time.Millisecond)))
			}
		}
	}
	if r.stopped && r.fired < r.cfg.Ticks() {
		rep.Notes = append(rep.Notes, fmt.Sprintf("stopped early: %d of %d ticks fired; the counts cover those", r.fired, r.cfg.Ticks()))
	}
	return rep
}

// historyLocked is the history the checker reads, with what the store
// says: a write the node never reported (killed right after, or a commit
// whose answer was lost) but whose EXECUTED row is there committed. It
// returns the operations and the critical sections they came from.
func (r *Run) historyLocked(committed map[string]bool, fenced bool) ([]checker.Op, map[string]*sectionRecord) {
	var ops []checker.Op
	sections := map[string]*sectionRecord{}
	for _, id := range r.order {
		s := *r.sections[id]
		switch {
		case committed[id] && s.WriteResult != checker.OpOK:
			s.WriteResult, s.WriteReturn = checker.OpOK, math.MaxInt64
			if s.WriteCall == 0 {
				s.WriteCall = s.ReadCall
			}
		case !committed[id] && s.WriteResult == checker.OpUnknown:
			// Its EXECUTED row commits with its write: none, so the write
			// (and its fence check) rolled back.
			s.WriteCall, s.WriteResult = 0, ""
		}
		sections[id] = &s
		ops = append(ops, s.ops(fenced)...)
	}
	for _, c := range r.claims {
		ops = append(ops, checker.Op{Job: c.Job, Kind: checker.OpClaim, Node: c.Node, Token: c.Token, Fenced: fenced, Result: checker.OpOK, Call: c.Call, Return: c.At})
	}
	return ops, sections
}

// jobReportLocked counts a job's ticks (fired, missed, applied twice),
// its critical sections and its refusals, and its lost updates: the
// effects the store applied less what its ledger holds.
func (r *Run) jobReportLocked(j lab.JobSpec, fires []int, st *storeAccount, sections map[string]*sectionRecord) lab.JobReport {
	jr := lab.JobReport{Name: j.Name, Every: j.Every.String(), Work: j.Work.String(), Ticks: len(fires),
		Ledger: st.ledgers[j.Name], Checker: lab.CheckOK, Harms: []lab.Harm{}}
	var effects int64
	for _, t := range fires {
		ex := st.executions[jobTick{j.Name, t}]
		effects += int64(len(ex))
		switch {
		case len(ex) == 0:
			jr.MissedTicks++
		case len(ex) > 1:
			jr.DuplicatesApplied++
			if retriesOnly(ex) {
				jr.Retries++
			}
		}
	}
	for _, s := range sections {
		if s.Job != j.Name {
			continue
		}
		if s.ReadResult == checker.OpOK {
			jr.Executions++
		}
		if s.ReadResult == checker.OpRefused || s.WriteResult == checker.OpRefused {
			jr.StaleRejected++
		}
	}
	for t, n := range r.entered {
		if t.Job == j.Name && n > 1 {
			jr.DuplicateTicks++
		}
	}
	jr.LostUpdates = effects - jr.Ledger
	rc := refiresOf(st.executions, j.Name)
	jr.Refires, jr.RetriedRefires = rc.all, rc.retried
	return jr
}

// standbyNoteLocked says what the second region (the nodes on a hot
// standby) did: from the nodes' events, and from the store of record (its
// EXECUTED rows by their entered_ms), before a promotion and after it.
func (r *Run) standbyNoteLocked(sections map[string]*sectionRecord, st *storeAccount) string {
	promoted := r.promotedAt.UnixNano()
	before := func(at int64) bool { return promoted == 0 || at < promoted }
	var ran, ranAfter, refused, rows, rowsAfter int
	for _, s := range sections {
		if r.onStandby(s.Node) && s.ReadResult == checker.OpOK {
			if before(s.ReadCall) {
				ran++
			} else {
				ranAfter++
			}
		}
	}
	for _, e := range r.events {
		if e.Kind == lab.EventNotPrimary {
			refused++
		}
	}
	for _, execs := range st.executions {
		for _, a := range execs {
			if r.onStandby(a.Node) {
				if before(a.EnteredMS * int64(time.Millisecond)) {
					rows++
				} else {
					rowsAfter++
				}
			}
		}
	}
	note := fmt.Sprintf("the second region (the last %d nodes, on a hot standby) entered %d critical sections and committed %d ticks (the store of record's rows)", r.cfg.Standby, ran, rows)
	if promoted != 0 {
		note += fmt.Sprintf(" before the promotion (its switchover began at %.3fs), and %d and %d after", r.secs(promoted), ranAfter, rowsAfter)
	}
	if r.strat.Mode == schedule.ModeRunKey {
		note += fmt.Sprintf("; its schedulers saw %d ticks as not the primary's", refused)
	} else {
		note += "; on the standby, its election and its worker's claims are refused"
	}
	return note
}

// judge classifies a job's harm, from the store and the checker, and
// compares the two: the store's count of duplicates (dups) and lost
// updates (lost) against the checker's verdict.
func (r *Run) judge(jr *lab.JobReport, dups int, lost int64, rep *lab.Report) {
	if jr.DuplicatesApplied > jr.Retries {
		jr.Harms = append(jr.Harms, lab.HarmDuplicate)
	}
	if jr.Retries > 0 {
		jr.Harms = append(jr.Harms, lab.HarmRetryDuplicate)
	}
	if jr.LostUpdates != 0 {
		jr.Harms = append(jr.Harms, lab.HarmLostUpdate)
	}
	storeHarm := dups > 0 || lost != 0
	disagree := ""
	switch {
	case int64(dups) != int64(jr.DuplicatesApplied) || lost != jr.LostUpdates:
		disagree = fmt.Sprintf("%s: the audit counts %d duplicates and %d lost updates, SQL %d and %d", jr.Name, jr.DuplicatesApplied, jr.LostUpdates, dups, lost)
	case storeHarm && jr.Checker == lab.CheckOK:
		disagree = fmt.Sprintf("%s: the store shows %d ticks applied twice and %d lost updates, the checker says ok", jr.Name, dups, lost)
	case !storeHarm && jr.Checker == lab.CheckViolation && r.fenceRule() == checker.FenceNone:
		disagree = fmt.Sprintf("%s: the checker says %q, the store shows no duplicate and no lost update, and nothing was fenced", jr.Name, jr.Reason)
	case !storeHarm && jr.Checker == lab.CheckViolation:
		// Fenced and the ledger adds up: the checker's violation is a
		// token rule, which only it can see.
		jr.Harms = append(jr.Harms, lab.HarmStaleAccepted)
	}
	if disagree != "" {
		rep.StoreAgrees = false
		rep.Disagreement = cmp.Or(rep.Disagreement, disagree)
	}
}

// judgeRefiresLocked names a job's fresh re-fires as a harm and compares
// its re-fires in the store with SQL's count and with the nodes' record
// (the sections as they reported them, before the audit completed them).
func (r *Run) judgeRefiresLocked(jr *lab.JobReport, sqlCount refireCount, rep *lab.Report) {
	if jr.Refires > jr.RetriedRefires {
		jr.Harms = append(jr.Harms, lab.HarmRefire)
	}
	var secs []*sectionRecord
	for _, id := range r.order {
		if s := r.sections[id]; s.Job == jr.Name {
			secs = append(secs, s)
		}
	}
	if disagree := judgeRefires(jr, sqlCount, recordRefires(secs)); disagree != "" {
		rep.StoreAgrees = false
		rep.Disagreement = cmp.Or(rep.Disagreement, disagree)
	}
}

// retriesOnly reports whether every execution of a tick after its first
// was a reaper's retry (run attempt 2 and up).
func retriesOnly(ex []auditRow) bool {
	first := slices.MinFunc(ex, func(a, b auditRow) int { return cmp.Compare(a.RunAttempt, b.RunAttempt) })
	for _, a := range ex {
		if a.Attempt != first.Attempt && a.RunAttempt <= first.RunAttempt {
			return false
		}
	}
	return true
}

// fenceRule is how the run's fence judges tokens, for the checker.
func (r *Run) fenceRule() checker.FenceRule {
	if !r.cfg.Fenced() {
		return checker.FenceNone
	}
	if r.strat.Token == lab.LeaseToken {
		return checker.FenceOwner
	}
	return checker.FenceToken
}

// ops are the checker's operations of a critical section: its read, and
// its write when it began.
func (s sectionRecord) ops(fenced bool) []checker.Op {
	read := checker.Op{Job: s.Job, Kind: checker.OpRead, Node: s.Node, Attempt: s.ID, Tick: int64(s.Tick), Token: s.Token, Owner: s.Owner,
		Fenced: fenced, Value: s.Read, Result: s.ReadResult, Call: s.ReadCall, Return: s.ReadReturn}
	if read.Result != checker.OpOK {
		read.Value = 0
	}
	ops := []checker.Op{read}
	if s.WriteCall != 0 && s.ReadResult == checker.OpOK {
		ops = append(ops, checker.Op{Job: s.Job, Kind: checker.OpWrite, Node: s.Node, Attempt: s.ID, Tick: int64(s.Tick), Token: s.Token, Owner: s.Owner,
			Fenced: fenced, Value: s.Read + 1, Result: s.WriteResult, Call: s.WriteCall, Return: s.WriteReturn})
	}
	return ops
}

func readAudit(ctx context.Context, db *sql.DB, run string) ([]auditRow, error) {
	rows, err := db.QueryContext(ctx, lab.AuditRowsSQL, run)
	if err != nil {
		return nil, fmt.Errorf("lab: read the audit rows: %w", err)
	}
	defer rows.Close()
	var audit []auditRow
	for rows.Next() {
		var a auditRow
		if err := rows.Scan(&a.Attempt, &a.Job, &a.Tick, &a.Node, &a.Token, &a.Owner, &a.RunAttempt, &a.Status, &a.Value, &a.AtMS, &a.EnteredMS); err != nil {
			return nil, fmt.Errorf("lab: read the audit rows: %w", err)
		}
		audit = append(audit, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lab: read the audit rows: %w", err)
	}
	return audit, nil
}

// readCounts reads (job, count) rows of a run.
func readCounts[N int | int64](ctx context.Context, db *sql.DB, query, run string) (map[string]N, error) {
	rows, err := db.QueryContext(ctx, query, run)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]N{}
	for rows.Next() {
		var job string
		var n N
		if err := rows.Scan(&job, &n); err != nil {
			return nil, err
		}
		out[job] = n
	}
	return out, rows.Err()
}

// tickTable is the per-tick table: for each job's tick, what each node's
// critical sections came to.
func tickTable(nodes int, jobs []lab.JobSpec, fires map[string][]int, sections []*sectionRecord) []lab.TickRow {
	index := map[jobTick]int{}
	var rows []lab.TickRow
	for _, j := range jobs {
		for _, t := range fires[j.Name] {
			index[jobTick{j.Name, t}] = len(rows)
			rows = append(rows, lab.TickRow{Job: j.Name, Tick: t, Cells: make([]string, nodes)})
		}
	}
	slices.SortFunc(sections, func(a, b *sectionRecord) int { return cmp.Compare(a.ReadCall, b.ReadCall) })
	executed := make([]int, len(rows))
	refused := make([]int, len(rows))
	for _, s := range sections {
		i, ok := index[jobTick{s.Job, s.Tick}]
		if !ok || s.Node < 1 || s.Node > nodes {
			continue
		}
		cell := ""
		switch {
		case s.WriteResult == checker.OpOK:
			cell = "EXEC"
			executed[i]++
		case s.ReadResult == checker.OpRefused || s.WriteResult == checker.OpRefused:
			cell = "STALE"
			refused[i]++
		case s.ReadResult == checker.OpOK:
			cell = "ENTER"
		default:
			continue
		}
		if s.Token != 0 {
			cell += fmt.Sprintf(" t%d", s.Token)
		}
		if prev := rows[i].Cells[s.Node-1]; prev != "" {
			cell = prev + ", " + cell
		}
		rows[i].Cells[s.Node-1] = cell
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
