package runner_test

import (
	"cmp"
	"database/sql"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// What a faulted run shows depends on races: which node got a job's lease
// at a tick, whether the faulted holder's successor read before or after
// its late write. So these tests assert what holds whichever way the races
// went: the report's per-job counts are what SQL over the store says, a
// harm in the store is reported (and is a violation for the checker), the
// harms a strategy's label excludes do not happen, and what the
// interleaving the events show forces (see faulted).

// auditRow is one row of aegis_lab_audit, read apart from the lab.
type auditRow struct {
	attempt    string
	tick, node int
	token      int64
	owner      string
	runAttempt int
	status     string
	value      sql.NullInt64
	atMS       int64
	enteredMS  int64
}

// jobStore is what the store of record says about one job of a run.
type jobStore struct {
	executed map[int][]auditRow // tick → its EXECUTED rows
	rows     []auditRow         // every EXECUTED row
	refused  int                // REFUSED rows
	ledger   int64
	hasRow   bool // the job has a ledger row
}

// store is what the store of record says about a run, by job.
type store map[string]*jobStore

func (s store) job(name string) *jobStore {
	j := s[name]
	if j == nil {
		j = &jobStore{executed: map[int][]auditRow{}}
		s[name] = j
	}
	return j
}

// committed reports whether attempt has an EXECUTED row.
func (s store) committed(attempt string) bool {
	for _, j := range s {
		for _, a := range j.rows {
			if a.attempt == attempt {
				return true
			}
		}
	}
	return false
}

// duplicates counts j's ticks with more than one EXECUTED row, and those
// of them whose every row after the first is a reaper's retry (a greater
// run attempt).
func (j *jobStore) duplicates() (all, retries int) {
	for _, rows := range j.executed {
		if len(rows) < 2 {
			continue
		}
		all++
		attempts := map[int]int{}
		for _, a := range rows {
			attempts[a.runAttempt]++
		}
		if len(attempts) == len(rows) { // distinct run attempts: one run, then its retries
			retries++
		}
	}
	return all, retries
}

// refires counts j's EXECUTED rows whose section entered after another
// EXECUTED row of its tick was stamped (a tick run again after it had
// committed), and those of them that share their run attempt with none of
// those rows (a reaper's retry, or the run it retried).
func (j *jobStore) refires() (all, retried int) {
	for _, rows := range j.executed {
		for _, t := range rows {
			var before []int
			for _, s := range rows {
				if s.attempt != t.attempt && s.atMS < t.enteredMS {
					before = append(before, s.runAttempt)
				}
			}
			if len(before) > 0 {
				all++
				if !slices.Contains(before, t.runAttempt) {
					retried++
				}
			}
		}
	}
	return all, retried
}

// lost is EXECUTED rows minus the ledger.
func (j *jobStore) lost() int64 { return int64(len(j.rows)) - j.ledger }

// staleAccepted returns a pair of EXECUTED rows whose order the fence must
// have refused: in commit order (the fence's row lock orders a job's
// writes, and each writer stamps its row after its check), a token lower
// than one already accepted, or an equal one from another owner. Fenced
// runs only.
func (j *jobStore) staleAccepted() (a, b auditRow, found bool) {
	rows := slices.Clone(j.rows)
	slices.SortStableFunc(rows, func(x, y auditRow) int {
		return cmp.Or(cmp.Compare(x.atMS, y.atMS), cmp.Compare(x.token, y.token))
	})
	for i := 1; i < len(rows); i++ {
		prev, cur := rows[i-1], rows[i]
		if cur.token < prev.token || (cur.token == prev.token && cur.owner != prev.owner) {
			return prev, cur, true
		}
	}
	return auditRow{}, auditRow{}, false
}

// readStoreAt reads the run's audit and ledger rows with SQL, from the
// PostgreSQL at url.
func readStoreAt(t *testing.T, url, run string) store {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	s := store{}
	rows, err := db.QueryContext(t.Context(), `SELECT attempt, job, tick, node, token, owner, run_attempt, status, value, at_ms, entered_ms
FROM aegis_lab_audit WHERE run = $1`, run)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var a auditRow
		var job string
		require.NoError(t, rows.Scan(&a.attempt, &job, &a.tick, &a.node, &a.token, &a.owner, &a.runAttempt, &a.status, &a.value, &a.atMS, &a.enteredMS))
		j := s.job(job)
		switch a.status {
		case "EXECUTED":
			require.True(t, a.value.Valid, "attempt %s: an EXECUTED row has the ledger value it wrote", a.attempt)
			j.executed[a.tick] = append(j.executed[a.tick], a)
			j.rows = append(j.rows, a)
		case "REFUSED":
			j.refused++
		default:
			t.Fatalf("attempt %s: status %q", a.attempt, a.status)
		}
	}
	require.NoError(t, rows.Err())
	ledgers, err := db.QueryContext(t.Context(), `SELECT job, value FROM aegis_lab_ledger WHERE run = $1`, run)
	require.NoError(t, err)
	defer ledgers.Close()
	for ledgers.Next() {
		var job string
		var v int64
		require.NoError(t, ledgers.Scan(&job, &v))
		j := s.job(job)
		j.ledger, j.hasRow = v, true
	}
	require.NoError(t, ledgers.Err())
	return s
}

// grid lists the ticks (from 1) at which a job of cadence every fires in
// a run of ticks ticks of tick from start: the epoch-aligned multiples of
// its cadence, as package schedule's Interval fires.
func grid(start time.Time, tick, every time.Duration, ticks int) []int {
	var out []int
	for t := 1; t <= ticks; t++ {
		if start.Add(time.Duration(t-1)*tick).UnixNano()%int64(every) == 0 {
			out = append(out, t)
		}
	}
	return out
}

// requireConsistent checks the report against the store, read with SQL
// apart from the lab, and against its own events: per job, its
// duplicates_applied are the ticks with more than one EXECUTED row, its
// lost_updates the EXECUTED rows minus the ledger, its missed ticks the
// ticks of its grid with none, its ledger the ledger row; a harm in the
// store is a checker violation; the top-level counts are the jobs' sums;
// and the lab's own SQL agrees with its checker.
func requireConsistent(t *testing.T, r *runner.Run, rep *lab.Report) store {
	t.Helper()
	return requireConsistentAt(t, testenv.PostgresURL(t), r, rep)
}

// requireConsistentAt is requireConsistent over the store of record at
// url.
func requireConsistentAt(t *testing.T, url string, r *runner.Run, rep *lab.Report) store {
	t.Helper()
	require.True(t, rep.StoreAgrees, "checker disagrees with the store: %s", rep.Disagreement)
	st := readStoreAt(t, url, r.ID)
	cfg := r.Config()
	stopped := slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "stopped early") })
	s, ok := lab.LookupStrategy(rep.Strategy)
	require.True(t, ok)

	var names []string
	for name, j := range st {
		require.True(t, j.hasRow, "job %s has audit rows but no ledger row", name)
		names = append(names, name)
	}
	var reported []string
	for _, j := range rep.Jobs {
		reported = append(reported, j.Name)
	}
	require.ElementsMatch(t, names, reported, "the report has a part for each job of the run's ledger")

	// What the events say, per job: entries, refusals, missed ticks, and
	// the ticks more than one section entered.
	entered, stale, missed := map[string]int{}, map[string]int{}, map[string][]int{}
	type jobTick struct {
		job  string
		tick int
	}
	missedAt := map[jobTick]float64{}
	enteredTick := map[string]map[int]int{}
	for _, e := range rep.Events {
		switch e.Kind {
		case lab.EventEntered:
			entered[e.Job]++
			if enteredTick[e.Job] == nil {
				enteredTick[e.Job] = map[int]int{}
			}
			enteredTick[e.Job][e.Tick]++
		case lab.EventStale:
			stale[e.Job]++
		case lab.EventMissed:
			missed[e.Job] = append(missed[e.Job], e.Tick)
			missedAt[jobTick{e.Job, e.Tick}] = e.T
		}
	}
	// A tick whose run began only after its window closed (a queue
	// backlog, a loaded machine) is reported missed at the window's end
	// and may commit later: its missed event is followed by a commit.
	late := map[string][]int{}
	for _, e := range rep.Events {
		k := jobTick{e.Job, e.Tick}
		if at, ok := missedAt[k]; ok && e.Kind == lab.EventExecuted && e.T > at && !slices.Contains(late[e.Job], e.Tick) {
			late[e.Job] = append(late[e.Job], e.Tick)
		}
	}

	var sum lab.Report
	for _, jr := range rep.Jobs {
		j := st.job(jr.Name)
		spec, from := findJob(t, cfg, rep, jr.Name)
		fires := slices.DeleteFunc(grid(r.StartTime(), cfg.Tick, spec.Every, cfg.Ticks()), func(tick int) bool {
			return float64(tick-1)*cfg.Tick.Seconds() < from-0.0005 // before an edit added it
		})
		if !stopped {
			require.Equal(t, len(fires), jr.Ticks, "%s: ticks: its grid ticks in the run", jr.Name)
		}
		var sqlMissed []int
		for _, tick := range fires[:min(len(fires), jr.Ticks)] {
			if len(j.executed[tick]) == 0 {
				sqlMissed = append(sqlMissed, tick)
			}
		}
		for tick := range j.executed {
			require.Contains(t, fires, tick, "%s: tick %d was executed, and is not one of its fire times", jr.Name, tick)
		}
		dups, retries := j.duplicates()
		require.Equal(t, dups, jr.DuplicatesApplied, "%s: duplicates_applied: the ticks with more than one EXECUTED row", jr.Name)
		require.Equal(t, retries, jr.Retries, "%s: retried_duplicates: the duplicates whose later rows are a reaper's retries", jr.Name)
		require.Equal(t, j.lost(), jr.LostUpdates, "%s: lost_updates: EXECUTED rows (%d) minus the ledger (%d)", jr.Name, len(j.rows), j.ledger)
		refires, retriedRefires := j.refires()
		require.Equal(t, refires, jr.Refires, "%s: refires: the EXECUTED rows that entered after another of their tick was stamped", jr.Name)
		require.Equal(t, retriedRefires, jr.RetriedRefires, "%s: retried_refires: of them, those of another run attempt than every earlier commit", jr.Name)
		require.Equal(t, refires > retriedRefires, slices.Contains(jr.Harms, lab.HarmRefire), "%s: harms %v: %d re-fires, %d of them retried", jr.Name, jr.Harms, refires, retriedRefires)
		require.Equal(t, j.ledger, jr.Ledger, "%s: the ledger", jr.Name)
		require.Equal(t, len(sqlMissed), jr.MissedTicks, "%s: missed_ticks: the grid ticks with no EXECUTED row (%v)", jr.Name, sqlMissed)
		require.ElementsMatch(t, append(slices.Clone(sqlMissed), late[jr.Name]...), missed[jr.Name], "%s: a missed event for each tick the store has no EXECUTED row of (and for each that began after its window and committed late: %v)", jr.Name, late[jr.Name])
		require.Equal(t, entered[jr.Name], jr.Executions, "%s: executions: the sections that read the ledger", jr.Name)
		require.Equal(t, stale[jr.Name], jr.StaleRejected, "%s: stale_rejected: the sections the fence refused", jr.Name)
		require.LessOrEqual(t, j.refused, jr.StaleRejected, "%s: every REFUSED row is a stale rejection", jr.Name)
		var dupTicks int
		for _, n := range enteredTick[jr.Name] {
			if n > 1 {
				dupTicks++
			}
		}
		require.Equal(t, dupTicks, jr.DuplicateTicks, "%s: duplicate_ticks: the ticks more than one section entered", jr.Name)

		// Two commits that wrote the same value both read the one before:
		// the ledger cannot count both (a lost update), and no order of the
		// job's operations explains it.
		wrote := map[int64][]string{}
		for _, a := range j.rows {
			wrote[a.value.Int64] = append(wrote[a.value.Int64], a.attempt)
		}
		for v, attempts := range wrote {
			if len(attempts) > 1 {
				require.Positive(t, jr.LostUpdates, "%s: attempts %v all wrote %d", jr.Name, attempts, v)
			}
		}
		require.Equal(t, dups > retries, slices.Contains(jr.Harms, lab.HarmDuplicate), "%s: harms %v: %d duplicates, %d of them retries", jr.Name, jr.Harms, dups, retries)
		require.Equal(t, retries > 0, slices.Contains(jr.Harms, lab.HarmRetryDuplicate), "%s: harms %v: %d retried duplicates", jr.Name, jr.Harms, retries)
		require.Equal(t, j.lost() != 0, slices.Contains(jr.Harms, lab.HarmLostUpdate), "%s: harms %v: %d lost updates", jr.Name, jr.Harms, j.lost())
		if dups > 0 || j.lost() != 0 {
			require.Equal(t, lab.CheckViolation, jr.Checker, "%s: the store shows %d ticks applied twice and %d lost updates", jr.Name, dups, j.lost())
		}
		if rep.Fenced {
			if a, b, bad := j.staleAccepted(); bad {
				require.Equal(t, lab.CheckViolation, jr.Checker, "%s: the fence accepted token %d (attempt %s) after token %d (attempt %s)", jr.Name, b.token, b.attempt, a.token, a.attempt)
			}
		} else {
			require.Zero(t, jr.StaleRejected, "%s: unfenced, nothing refuses a section", jr.Name)
		}

		sum.Ticks += jr.Ticks
		sum.Executions += jr.Executions
		sum.DuplicateTicks += jr.DuplicateTicks
		sum.DuplicatesApplied += jr.DuplicatesApplied
		sum.StaleRejected += jr.StaleRejected
		sum.MissedTicks += jr.MissedTicks
		sum.LostUpdates += jr.LostUpdates
		sum.Refires += jr.Refires
		sum.Balance += jr.Ledger
	}
	require.Equal(t, sum.Ticks, rep.Ticks, "ticks: the jobs' sum")
	require.Equal(t, sum.Executions, rep.Executions, "executions: the jobs' sum")
	require.Equal(t, sum.DuplicateTicks, rep.DuplicateTicks, "duplicate_ticks: the jobs' sum")
	require.Equal(t, sum.DuplicatesApplied, rep.DuplicatesApplied, "duplicates_applied: the jobs' sum")
	require.Equal(t, sum.StaleRejected, rep.StaleRejected, "stale_rejected: the jobs' sum")
	require.Equal(t, sum.MissedTicks, rep.MissedTicks, "missed_ticks: the jobs' sum")
	require.Equal(t, sum.LostUpdates, rep.LostUpdates, "lost_updates: the jobs' sum")
	require.Equal(t, sum.Refires, rep.Refires, "refires: the jobs' sum")
	require.Equal(t, sum.Balance, rep.Balance, "the ledgers' sum")
	worst := lab.CheckOK
	for _, jr := range rep.Jobs {
		if jr.Checker == lab.CheckViolation || (jr.Checker == lab.CheckUnknown && worst == lab.CheckOK) {
			worst = jr.Checker
		}
	}
	require.Equal(t, worst, rep.Checker, "checker: the worst job's verdict")
	if rep.Checker == lab.CheckViolation {
		require.NotEmpty(t, rep.Harms, "a violation is a harm the report names")
	}

	// Unsafe is exactly the harms the strategy's label excludes.
	excluded := s.Excludes(rep.Config)
	var unsafe []lab.Harm
	for _, h := range rep.Harms {
		if slices.Contains(excluded, h) {
			unsafe = append(unsafe, h)
		}
	}
	require.ElementsMatch(t, unsafe, rep.Unsafe, "unsafe: the harms %v that the label's exclusions %v name", rep.Harms, excluded)
	return st
}

// requireLabelKept checks that the run showed none of the harms its
// strategy's label excludes, by the report and by SQL.
func requireLabelKept(t *testing.T, rep *lab.Report, st store) {
	t.Helper()
	s, _ := lab.LookupStrategy(rep.Strategy)
	excluded := s.Excludes(rep.Config)
	require.Empty(t, rep.Unsafe, "%s (fenced %t) excludes %v", rep.Strategy, rep.Fenced, excluded)
	for _, h := range rep.Harms {
		require.NotContains(t, excluded, h, "%s (fenced %t) excludes %s", rep.Strategy, rep.Fenced, h)
	}
	if !slices.ContainsFunc([]lab.Harm{lab.HarmDuplicate, lab.HarmRetryDuplicate, lab.HarmLostUpdate, lab.HarmStaleAccepted, lab.HarmRefire},
		func(h lab.Harm) bool { return !slices.Contains(excluded, h) }) {
		require.Equal(t, lab.CheckOK, rep.Checker, "%s (fenced %t) excludes every harm", rep.Strategy, rep.Fenced)
	}
	for name, j := range st {
		dups, retries := j.duplicates()
		if slices.Contains(excluded, lab.HarmLostUpdate) {
			require.Zero(t, j.lost(), "%s: %d EXECUTED rows, ledger %d: a lost update", name, len(j.rows), j.ledger)
		}
		if slices.Contains(excluded, lab.HarmDuplicate) {
			require.Equal(t, retries, dups, "%s: a tick applied twice other than by a reaper's retry", name)
		}
		if slices.Contains(excluded, lab.HarmRetryDuplicate) {
			require.Zero(t, retries, "%s: a tick applied twice by a retry", name)
		}
		if refires, retried := j.refires(); slices.Contains(excluded, lab.HarmRefire) {
			require.Equal(t, retried, refires, "%s: a tick run again after it committed, other than by a reaper's retry", name)
		}
		if slices.Contains(excluded, lab.HarmStaleAccepted) {
			a, b, bad := j.staleAccepted()
			require.False(t, bad, "%s: the fence accepted token %d (attempt %s, owner %s) after token %d (attempt %s, owner %s)",
				name, b.token, b.attempt, b.owner, a.token, a.attempt, a.owner)
		}
	}
}

// findJob returns the schedule of the job called name in a run of cfg,
// and from when (run seconds) it runs: its start, or when an edit added
// it (its chaos event says).
func findJob(t *testing.T, cfg lab.Config, rep *lab.Report, name string) (lab.JobSpec, float64) {
	t.Helper()
	jobs := cfg.Catalog
	if jobs == nil {
		jobs = lab.DefaultCatalog(cfg.Tick, cfg.Work)
	}
	for _, j := range jobs {
		if j.Name == name {
			return j, math.Inf(-1)
		}
	}
	for _, ch := range cfg.Chaos {
		if ch.Kind != lab.Edit || ch.Target != name || !strings.Contains(ch.Spec, "/") {
			continue
		}
		added, err := lab.ParseCatalog(name + "=" + ch.Spec)
		require.NoError(t, err)
		e := chaosEvent(t, rep.Events, lab.EventChaos, name+" added to the catalog")
		m := addedFromRE.FindStringSubmatch(e.Detail)
		require.NotNil(t, m, "the edit says from when %s runs: %s", name, e.Detail)
		from, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return added[0], from
	}
	t.Fatalf("job %q is not in the run's catalog %s", name, lab.FormatCatalog(jobs))
	return lab.JobSpec{}, 0
}

var addedFromRE = regexp.MustCompile(`, from ([+-][0-9.]+)s \(version`)

// section is one critical section as the run's events tell it.
type section struct {
	attempt string
	node    int
	job     string
	tick    int
	token   int64
	enter   float64
	entered float64 // when its read returned; -1 if it never did
	read    int64
	writing float64 // when its write began; -1 if it never did
	end     string  // executed, stale or abandoned; "" if it never ended
	endedAt float64
}

// sections returns the run's critical sections, by attempt, from its
// events.
func sections(rep *lab.Report) map[string]*section {
	out := map[string]*section{}
	for _, e := range rep.Events {
		if e.Attempt == "" {
			continue
		}
		s := out[e.Attempt]
		if s == nil {
			s = &section{attempt: e.Attempt, node: e.Node, job: e.Job, tick: e.Tick, token: e.Token, enter: e.T, entered: -1, writing: -1}
			out[e.Attempt] = s
		}
		switch e.Kind {
		case lab.EventEntered:
			s.entered = e.T
			if e.Value != nil {
				s.read = *e.Value
			}
		case lab.EventWriting:
			s.writing = e.T
		case lab.EventExecuted, lab.EventStale, lab.EventAbandon:
			s.end, s.endedAt = e.Kind, e.T
		}
	}
	return out
}

// fault is a fault of a node the run's events show.
type fault struct {
	node     int
	at, to   float64 // from the fault to its heal (+Inf for a kill)
	job      string  // the holder's section the fault named
	tick     int
	victim   *section // that section
	sections map[string]*section
}

var insideRE = regexp.MustCompile(`inside (\S+) tick (\d+)`)

// findFault finds the run's first fault whose chaos event's detail
// contains what, and the holder's section it took: the node's section of
// the job and tick the detail names, which had read before the fault and
// had not ended before it.
func findFault(t *testing.T, rep *lab.Report, what string) (fault, bool) {
	t.Helper()
	f := fault{to: 1e9, sections: sections(rep)}
	for _, e := range rep.Events {
		switch {
		case f.node == 0 && e.Kind == lab.EventChaos && strings.Contains(e.Detail, what):
			f.node, f.at = e.Node, e.T
			if m := insideRE.FindStringSubmatch(e.Detail); m != nil {
				f.job = m[1]
				f.tick, _ = strconv.Atoi(m[2])
			}
		case f.node != 0 && e.Kind == lab.EventHealed && e.Node == f.node && e.T >= f.at:
			f.to = min(f.to, e.T)
		}
	}
	if f.node == 0 {
		return fault{}, false
	}
	for _, s := range f.sections {
		if s.node == f.node && s.job == f.job && s.tick == f.tick && s.entered >= 0 && s.entered <= f.at && (s.end == "" || s.endedAt >= f.at) {
			f.victim = s
		}
	}
	return f, true
}

// successors are the other nodes' sections of the victim's job that read
// the ledger after the fault began and before the victim's write began
// (or before the victim ended, when it never wrote), with a greater token
// (any, for a strategy without tokens).
func (f fault) successors() []*section {
	until := f.victim.writing
	if until < 0 {
		until = 1e9
	}
	var out []*section
	for _, s := range f.sections {
		if s.job == f.victim.job && s.node != f.node && s.entered > f.at && s.entered < until && (s.token > f.victim.token || f.victim.token == 0) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *section) int { return cmp.Compare(a.entered, b.entered) })
	return out
}

// requireFaultOutcome asserts what a pause or partition of the holder
// forces, whichever way the races went: fenced, once a successor read the
// job's ledger with a greater token (registering it) before the victim's
// write, the victim's write is refused, and a victim that ended refused is
// counted; unfenced, a victim that committed after a successor that read
// the same value is a lost update and a violation. resumed says the victim
// must have ended (a paused holder writes at once when it resumes).
func requireFaultOutcome(t *testing.T, rep *lab.Report, st store, what string, resumed bool) {
	t.Helper()
	f, ok := findFault(t, rep, what)
	require.True(t, ok, "the run's events have the fault %q", what)
	require.NotNil(t, f.victim, "node%d was inside %s tick %d at the fault", f.node, f.job, f.tick)
	v := f.victim
	if resumed {
		require.NotEmpty(t, v.end, "the paused holder's section %s ended after it resumed", v.attempt)
	}
	committed := st.committed(v.attempt)
	switch v.end {
	case lab.EventExecuted:
		require.True(t, committed, "section %s executed: it has an EXECUTED row", v.attempt)
	case lab.EventStale:
		require.False(t, committed, "section %s was refused: it has no EXECUTED row", v.attempt)
	}
	var jr lab.JobReport
	for _, j := range rep.Jobs {
		if j.Name == v.job {
			jr = j
		}
	}
	if v.end == lab.EventStale {
		require.True(t, rep.Fenced, "section %s refused in an unfenced run", v.attempt)
		require.GreaterOrEqual(t, jr.StaleRejected, 1, "%s: the victim's refusal is counted", v.job)
	}
	succ := f.successors()
	if rep.Fenced {
		if len(succ) > 0 {
			require.False(t, committed, "section %s (token %d) committed after %s read with token %d: the fence must refuse it",
				v.attempt, v.token, succ[0].attempt, succ[0].token)
			if resumed {
				require.Equal(t, lab.EventStale, v.end, "the resumed holder's write is refused")
			}
		}
		return
	}
	for _, s := range succ {
		if committed && st.committed(s.attempt) && s.read == v.read {
			require.Positive(t, jr.LostUpdates, "%s: %s and %s both read %d and both committed", v.job, v.attempt, s.attempt, v.read)
			require.Equal(t, lab.CheckViolation, jr.Checker)
		}
	}
}

// within bounds a wait on a run's events.
const within = 60 * time.Second

// nextEvent returns the next event that matches, failing the test when
// the run ends or within passes first.
func nextEvent(t *testing.T, events <-chan lab.Event, what string, match func(lab.Event) bool) lab.Event {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e, ok := <-events:
			require.True(t, ok, "the run ended before %s", what)
			if match(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s within %s", what, within)
		}
	}
}

// drain reads events until the run ends (the channel closes), failing the
// test when that takes longer than within.
func drain(t *testing.T, events <-chan lab.Event, each func(lab.Event)) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return
			}
			each(e)
		case <-timeout:
			t.Fatalf("the run did not end within %s", within)
		}
	}
}

// logEvents logs a failed run's events, for a failure in CI.
func logEvents(t *testing.T, rep *lab.Report) {
	t.Helper()
	var ev strings.Builder
	for _, e := range rep.Events {
		v := ""
		if e.Value != nil {
			v = fmt.Sprintf(" value %d", *e.Value)
		}
		fmt.Fprintf(&ev, "%7.3f node%d %s %s tick %d token %d %s%s %s\n", e.T, e.Node, e.Kind, e.Job, e.Tick, e.Token, e.Attempt, v, e.Detail)
	}
	t.Log("events:\n" + ev.String())
}
