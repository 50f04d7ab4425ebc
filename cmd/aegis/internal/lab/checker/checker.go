// Package checker is the lab's checker of per-job histories. Each job has
// its own ledger row (a counter) and its own fence resource, so each job is
// checked on its own, for linearizability (porcupine) against the
// specification of one fenced ledger row:
//
//   - a read returns the ledger's value; a fenced read presents its token to
//     the fence, which registers it, so a later lower token is refused;
//   - a committed write sets the ledger to the value its attempt read + 1,
//     so it must find the ledger still at that value: otherwise it
//     overwrote an effect it did not read (a lost update);
//   - a tick's effect is committed at most once, in sequence or not: the
//     state holds the set of ticks applied, because "B reads what A wrote
//     for the same tick and writes + 1" is a valid counter history and
//     still a harm;
//   - a fenced read or write lands only if the fence's rule accepts its
//     token at that point, and is refused only if the rule refuses it, so
//     a refusal caused by a successor that was itself refused later (a
//     cascade) is explained, and a refusal nobody caused is not;
//   - an operation whose outcome is unknown may or may not have taken
//     effect.
package checker

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/aegislab/aegis"
)

// Verdicts of the checker.
const (
	CheckOK        = "ok"
	CheckViolation = "violation"
	CheckUnknown   = "unknown"
)

// OpKind is what one operation of a job's history is.
type OpKind string

const (
	// OpClaim registers its token with the fence without reading (the
	// optimistic strategy's version bump).
	OpClaim OpKind = "claim"
	// OpRead is the read transaction: Value is the ledger value read.
	OpRead OpKind = "read"
	// OpWrite is the write transaction: Value is the value written (the
	// value read + 1).
	OpWrite OpKind = "write"
)

// OpResult is how an operation ended.
type OpResult string

const (
	// OpOK: the read returned, the write committed, the claim registered.
	OpOK OpResult = "ok"
	// OpRefused: the fence refused the token (for an unfenced op, another
	// refusal, such as a unique key: it took no effect).
	OpRefused OpResult = "refused"
	// OpUnknown: the node was killed, or an error came after a commit that
	// may or may not have landed.
	OpUnknown OpResult = "unknown"
)

// FenceRule is how a job's fence judges tokens.
type FenceRule string

const (
	// FenceNone: no fence, tokens mean nothing.
	FenceNone FenceRule = "none"
	// FenceToken is fence.Check: a token at least the greatest accepted
	// lands, from anyone.
	FenceToken FenceRule = "token"
	// FenceOwner is fence.CheckLease: a greater token lands; an equal one
	// only from the owner that registered it.
	FenceOwner FenceRule = "owner"
)

// Op is one operation of a job's history.
type Op struct {
	Job  string // the catalog's job: its ledger row and fence resource
	Kind OpKind
	Node int // the node's number, whatever its incarnation
	// Attempt is the critical section the operation belongs to
	// (node.incarnation.seq); a read and its write share it.
	Attempt string
	// Tick is the tick's fire time (ms): for a write, the tick whose effect
	// it commits.
	Tick  int64
	Token int64 // the token presented to the fence (when Fenced)
	// Owner is the holder's identity (a hash; "" when none), compared as
	// given under FenceOwner. Never the lease's owner value itself: its
	// first 8 bytes appear in reasons and the visualisation.
	Owner string
	// Fenced says the operation went through the fence: a read or write of
	// a fenced strategy, a claim. Unfenced operations skip every token rule.
	Fenced bool
	Value  int64 // a read's value read, a write's value written; unused for a claim
	Result OpResult
	// Call and Return are in nanoseconds; Return 0 means the operation
	// never returned (its Result is then OpUnknown).
	Call, Return int64
}

// JobVerdict is the checker's verdict on one job.
type JobVerdict struct {
	Job string
	// Verdict is CheckOK, CheckViolation or CheckUnknown (the check ran out
	// of time).
	Verdict string
	// Reason, for a violation, is the rule broken and the operation that
	// broke it, e.g. "tick 3000 applied twice (node 2's write 4, tick 3000,
	// …)": a harm two committed writes show (a tick applied twice, a lost
	// update) when there is one, else the first rule broken in the order
	// porcupine got furthest with (a token accepted after a greater one or
	// from two owners, a refusal nobody caused, a read no write explains).
	Reason string
	// HTML is the path of porcupine's visualisation, when written.
	HTML string
}

// CheckJobs partitions ops by Job and checks each job's history under rule
// for linearizability (porcupine), each job within timeout, one job after
// another. A job's verdict is CheckUnknown when its check runs out of time,
// unless two of its committed writes already prove a harm (one tick twice,
// one value twice), which is a violation in any order. When htmlDir is not
// "", it writes one visualisation per violating job there, creating the
// directory. The verdicts are sorted by job.
//
// The ledger of every job starts at 0 with no token registered. Ops are
// checked as given: a bad field (an empty Job, an unknown Kind, Result or
// rule, a Return before its Call, an ok or refused op that never returned,
// a timeout not positive) is an error wrapping aegis.ErrInvalid, before
// anything is checked. A visualisation that cannot be written is an error
// returned with every verdict.
func CheckJobs(ops []Op, rule FenceRule, timeout time.Duration, htmlDir string) ([]JobVerdict, error) {
	switch rule {
	case FenceNone, FenceToken, FenceOwner:
	default:
		return nil, fmt.Errorf("check jobs: fence rule %q is none of none, token, owner: %w", rule, aegis.ErrInvalid)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("check jobs: timeout %v is not positive: %w", timeout, aegis.ErrInvalid)
	}
	jobs := map[string][]Op{}
	for i, op := range ops {
		if err := validOp(op); err != nil {
			return nil, fmt.Errorf("check jobs: op %d (job %q, attempt %q): %w", i, op.Job, op.Attempt, err)
		}
		jobs[op.Job] = append(jobs[op.Job], op)
	}
	names := make([]string, 0, len(jobs))
	for name := range jobs {
		names = append(names, name)
	}
	slices.Sort(names)
	if htmlDir != "" && len(names) > 0 {
		if err := os.MkdirAll(htmlDir, 0o755); err != nil {
			return nil, fmt.Errorf("check jobs: %w", err)
		}
	}
	m := ledgerModel{rule: rule}
	model := m.porcupine()
	files := map[string]bool{}
	var errs []error
	verdicts := make([]JobVerdict, 0, len(names))
	for _, name := range names {
		job := jobs[name]
		ends := m.ends(job)
		ops, lanes := m.operations(job, ends)
		res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		v := JobVerdict{Job: name, Verdict: CheckUnknown}
		harm := committedHarm(job)
		switch {
		case res == porcupine.Ok:
			v.Verdict = CheckOK
		case res == porcupine.Illegal || harm != "":
			// A harm between committed writes is a violation in any order,
			// so it stands even when the search ran out of time.
			v.Verdict, v.Reason = CheckViolation, harm
			if harm == "" {
				v.Reason = m.diagnose(job, ends, info)
			}
			if htmlDir != "" {
				path := filepath.Join(htmlDir, htmlName(name, files))
				if err := visualize(model, info, lanes, path); err != nil {
					errs = append(errs, fmt.Errorf("check jobs: job %q: write the visualisation: %w", name, err))
				} else {
					v.HTML = path
				}
			}
		}
		verdicts = append(verdicts, v)
	}
	return verdicts, errors.Join(errs...)
}

func validOp(op Op) error {
	switch {
	case op.Job == "":
		return fmt.Errorf("its Job is empty: %w", aegis.ErrInvalid)
	case op.Kind != OpClaim && op.Kind != OpRead && op.Kind != OpWrite:
		return fmt.Errorf("its Kind %q is none of claim, read, write: %w", op.Kind, aegis.ErrInvalid)
	case op.Result != OpOK && op.Result != OpRefused && op.Result != OpUnknown:
		return fmt.Errorf("its Result %q is none of ok, refused, unknown: %w", op.Result, aegis.ErrInvalid)
	case op.Return != 0 && op.Return < op.Call:
		return fmt.Errorf("its Return %d is before its Call %d: %w", op.Return, op.Call, aegis.ErrInvalid)
	case op.Return == 0 && op.Result != OpUnknown:
		return fmt.Errorf("its Result is %q but its Return is 0 (never returned): %w", op.Result, aegis.ErrInvalid)
	}
	return nil
}

// htmlName is a file name for job's visualisation, unique among taken: a job
// name is the catalog's, so it may hold characters a path must not.
func htmlName(job string, taken map[string]bool) string {
	base := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, job)
	name := base + ".html"
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d.html", base, i)
	}
	taken[name] = true
	return name
}

// ledgerState is the model's state for one job. It is small and never
// written in place: successors share ticks.
type ledgerState struct {
	value int64
	// fenced says a token was registered: before that, any token lands.
	fenced bool
	token  int64  // the greatest token the fence accepted
	owner  string // who registered it; kept under FenceOwner only
	ticks  []int64
	// tickHash is the XOR of the ticks' mixed values: equal sets, equal
	// hashes, whatever the order they were applied in.
	tickHash uint64
}

func (s ledgerState) equal(o ledgerState) bool {
	return s.value == o.value && s.fenced == o.fenced && s.token == o.token && s.owner == o.owner &&
		s.tickHash == o.tickHash && slices.Equal(s.ticks, o.ticks)
}

func (s ledgerState) hash() uint64 {
	return mix(uint64(s.value)) ^ mix(uint64(s.token)<<1|1) ^ s.tickHash
}

// mix is splitmix64's finaliser: ticks are multiples of a cadence, whose
// XOR alone would collide often.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (s ledgerState) applied(tick int64) bool {
	_, found := slices.BinarySearch(s.ticks, tick)
	return found
}

type ledgerModel struct{ rule FenceRule }

// fencing says op is judged by the fence.
func (m ledgerModel) fencing(op Op) bool { return op.Fenced && m.rule != FenceNone }

// refusal says why the fence would refuse op in s, or "" when it accepts
// it (or op does not go through it).
func (m ledgerModel) refusal(s ledgerState, op Op) string {
	switch {
	case !m.fencing(op) || !s.fenced || op.Token > s.token:
		return ""
	case op.Token < s.token:
		return fmt.Sprintf("token %d accepted after %d", op.Token, s.token)
	case m.rule == FenceOwner && op.Owner != s.owner:
		return fmt.Sprintf("token %d accepted from two owners", op.Token)
	}
	return ""
}

// register is s after the fence accepted op's token.
func (m ledgerModel) register(s ledgerState, op Op) ledgerState {
	if !m.fencing(op) {
		return s
	}
	s.fenced, s.token, s.owner = true, op.Token, ""
	if m.rule == FenceOwner {
		s.owner = op.Owner
	}
	return s
}

// commit is s after write op committed, or why it cannot have: the checks
// run in this order, so a stale token is named before the harm it let in.
func (m ledgerModel) commit(s ledgerState, op Op) (ledgerState, string) {
	if why := m.refusal(s, op); why != "" {
		return s, why
	}
	if s.applied(op.Tick) {
		return s, fmt.Sprintf("tick %d applied twice", op.Tick)
	}
	if op.Value != s.value+1 {
		if op.Value <= s.value {
			return s, fmt.Sprintf("lost update: write %d after the ledger reached %d", op.Value, s.value)
		}
		return s, fmt.Sprintf("write %d while the ledger held %d (no read explains it)", op.Value, s.value)
	}
	s = m.register(s, op)
	s.value = op.Value
	i, _ := slices.BinarySearch(s.ticks, op.Tick)
	s.ticks = slices.Insert(slices.Clip(s.ticks), i, op.Tick) // clipped: a copy, never the shared array
	s.tickHash ^= mix(uint64(op.Tick))
	return s, ""
}

// refused is s after op was refused, or why the fence cannot have refused
// it. A refusal of an unfenced op (a unique key, a lock not taken) changes
// nothing and breaks no rule: safety is what the checker judges.
func (m ledgerModel) refused(s ledgerState, op Op) ([]ledgerState, string) {
	if m.fencing(op) && m.refusal(s, op) == "" {
		if !s.fenced {
			return nil, fmt.Sprintf("token %d refused though no token was registered (a refusal nobody caused)", op.Token)
		}
		return nil, fmt.Sprintf("token %d refused though the fence held %d (a refusal nobody caused)", op.Token, s.token)
	}
	return []ledgerState{s}, ""
}

// step is every state op can lead to from s, the state unchanged first, or
// none and the rule op breaks there.
func (m ledgerModel) step(s ledgerState, op Op) ([]ledgerState, string) {
	if op.Result == OpRefused {
		if op.Kind == OpClaim {
			return []ledgerState{s}, "" // never given; nothing registered
		}
		return m.refused(s, op)
	}
	unknown := op.Result == OpUnknown
	switch op.Kind {
	case OpClaim, OpRead:
		why := m.refusal(s, op)
		switch {
		case unknown && (why != "" || !m.fencing(op)):
			return []ledgerState{s}, ""
		case unknown:
			return []ledgerState{s, m.register(s, op)}, ""
		case why != "":
			return nil, why
		case op.Kind == OpRead && op.Value != s.value:
			return nil, fmt.Sprintf("read %d while the ledger held %d", op.Value, s.value)
		}
		return []ledgerState{m.register(s, op)}, ""
	default:
		next, why := m.commit(s, op)
		switch {
		case unknown && why != "":
			return []ledgerState{s}, ""
		case unknown:
			return []ledgerState{s, next}, ""
		case why != "":
			return nil, why
		}
		return []ledgerState{next}, ""
	}
}

func (m ledgerModel) porcupine() porcupine.Model {
	nd := porcupine.NondeterministicModel{
		Init: func() []any { return []any{ledgerState{}} },
		Step: func(state, input, _ any) []any {
			next, _ := m.step(state.(ledgerState), input.(Op))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		Equal:             func(a, b any) bool { return a.(ledgerState).equal(b.(ledgerState)) },
		Hash:              func(s any) uint64 { return s.(ledgerState).hash() },
		DescribeOperation: func(input, _ any) string { return describeOp(input.(Op)) },
		DescribeState:     func(state any) string { return m.describeState(state.(ledgerState)) },
	}
	return nd.ToModel()
}

// operations is job's history for porcupine, each op ending at ends, and
// the name of each lane. Each node's ops go in lanes of their own
// (ClientId, for the visualisation), a new lane when an op overlaps the
// lane's last (a killed incarnation's op beside its successor's): node2,
// then node2 #2.
func (m ledgerModel) operations(job []Op, ends []int64) ([]porcupine.Operation, []string) {
	order := make([]int, len(job))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(job[a].Node, job[b].Node), cmp.Compare(job[a].Call, job[b].Call))
	})
	out := make([]porcupine.Operation, len(job))
	var lanes []int64 // the end of each lane's last op; the current node's lanes start at first
	var names []string
	first, node := 0, 0
	for k, i := range order {
		op := job[i]
		if k == 0 || op.Node != node {
			first, node = len(lanes), op.Node
		}
		ret := ends[i]
		lane := first
		for lane < len(lanes) && lanes[lane] >= op.Call {
			lane++
		}
		if lane == len(lanes) {
			lanes = append(lanes, 0)
			name := fmt.Sprintf("node%d", op.Node)
			if lane > first {
				name += fmt.Sprintf(" #%d", lane-first+1)
			}
			names = append(names, name)
		}
		lanes[lane] = ret
		out[i] = porcupine.Operation{ClientId: lane, Input: op, Call: op.Call, Output: op.Result, Return: ret}
	}
	return out, names
}

// visualize writes porcupine's visualisation of info to path, its lanes
// named for the lab's nodes (lanes[i] names ClientId i): porcupine labels
// them 0, 1, 2. A script after porcupine's (which draws the page as it
// loads) renames the labels and widens the page to the left for them, so
// that nothing porcupine laid out moves.
func visualize(model porcupine.Model, info porcupine.LinearizationInfo, lanes []string, path string) error {
	var b bytes.Buffer
	if err := porcupine.Visualize(model, info, &b); err != nil {
		return err
	}
	page := b.String()
	end := strings.LastIndex(page, "</body>")
	if end < 0 {
		return errors.New("porcupine's page has no </body>")
	}
	names, err := json.Marshal(lanes)
	if err != nil {
		return err
	}
	page = page[:end] + fmt.Sprintf(laneScript, names) + page[end:]
	return os.WriteFile(path, []byte(page), 0o644)
}

// laneScript names porcupine's lane labels: the texts of its background
// group that hold a lane number. The names are the lab's ("node2 #2"),
// never input from elsewhere.
const laneScript = `<script>
// Aegis: name the lanes for the lab's nodes.
(function () {
  const names = %s
  const svg = document.querySelector('#canvas svg')
  if (!svg) return
  const bg = svg.querySelector('g')
  let left = 0
  for (const t of bg.querySelectorAll(':scope > text')) {
    const i = Number(t.textContent)
    if (t.textContent === '' || !Number.isInteger(i) || i >= names.length) continue
    t.textContent = names[i]
    t.setAttribute('data-lane', String(i))
    left = Math.min(left, t.getBBox().x - 4)
  }
  for (const t of document.querySelectorAll('#legend text')) {
    if (t.textContent === 'Clients') t.textContent = 'Nodes'
  }
  if (left < 0) {
    const w = Number(svg.getAttribute('width')), h = Number(svg.getAttribute('height'))
    svg.setAttribute('viewBox', left + ' 0 ' + (w - left) + ' ' + h)
    svg.setAttribute('width', String(w - left))
  }
})()
</script>
`

// committedHarm names the first harm two committed writes prove on their
// own, whatever the order: two writes of one tick (a tick applied twice),
// or two writes of one value (a lost update: each commit sets the ledger to
// one more than it held, so the committed values are 1, 2, 3… each once,
// and a write that overwrote an effect it did not read writes a value an
// earlier write wrote). "First" is the pair whose second write returned
// first. It is "" when no two committed writes conflict.
func committedHarm(job []Op) string {
	var writes []Op
	for _, op := range job {
		if op.Kind == OpWrite && op.Result == OpOK {
			writes = append(writes, op)
		}
	}
	slices.SortStableFunc(writes, func(a, b Op) int { return cmp.Or(cmp.Compare(a.Return, b.Return), cmp.Compare(a.Call, b.Call)) })
	ticks, values := map[int64]Op{}, map[int64]Op{}
	for _, op := range writes {
		if first, dup := ticks[op.Tick]; dup {
			return fmt.Sprintf("tick %d applied twice (%s, after %s)", op.Tick, describeOp(op), describeOp(first))
		}
		if first, dup := values[op.Value]; dup {
			return fmt.Sprintf("lost update: write %d after the ledger reached %d (%s, after %s)", op.Value, op.Value, describeOp(op), describeOp(first))
		}
		ticks[op.Tick], values[op.Value] = op, op
	}
	return ""
}

// diagnose names the first rule the job's history breaks when no two
// committed writes show a harm (a stale token, a refusal nobody caused, a
// read no write explains, a harm through a write of unknown outcome).
// porcupine gives the longest prefixes it could linearize; diagnose
// replays the longest (the smallest in id order among equals, so the
// reason is the same every time) and, among the ops that could come next
// in real time (called before any remaining op ended), takes the first to
// end: no state the prefix leads to lets it step, and the rule it breaks in
// the first of those states is the reason. That is a rule broken in the
// order porcupine got furthest with, which is not always the order things
// happened in.
func (m ledgerModel) diagnose(job []Op, ends []int64, info porcupine.LinearizationInfo) string {
	var prefix []int
	if parts := info.PartialLinearizations(); len(parts) > 0 {
		for _, p := range parts[0] {
			if len(p) > len(prefix) || len(p) == len(prefix) && slices.Compare(p, prefix) < 0 {
				prefix = p
			}
		}
	}
	states := []ledgerState{{}}
	done := make([]bool, len(job))
	for _, id := range prefix {
		states = m.stepAll(states, job[id])
		done[id] = true
	}
	end := int64(math.MaxInt64)
	var rest []int
	for i := range job {
		if !done[i] {
			rest = append(rest, i)
			end = min(end, ends[i])
		}
	}
	slices.SortStableFunc(rest, func(a, b int) int {
		return cmp.Or(cmp.Compare(ends[a], ends[b]), cmp.Compare(job[a].Call, job[b].Call))
	})
	for _, i := range rest {
		if len(states) == 0 {
			break
		}
		if job[i].Call > end || len(m.stepAll(states, job[i])) > 0 {
			continue
		}
		_, why := m.step(states[0], job[i])
		return fmt.Sprintf("%s (%s)", why, describeOp(job[i]))
	}
	return "no order of the operations explains the history"
}

// ends is when each op of job ends for porcupine: its Return, and for an op
// of unknown outcome the earliest point after which it cannot take effect
// in any legal order, since the ledger only grows by one per commit, the
// set of ticks applied only grows and the fence's token never goes back:
//
//   - an unfenced read or claim of unknown outcome has no effect: its call;
//   - a write of unknown outcome cannot commit after a committed write of
//     the same tick or of a value at least its own;
//   - a fenced op of unknown outcome cannot register after a committed op
//     the fence accepted with a greater token (or, under FenceOwner, the
//     same token from another owner).
//
// Its "nothing happened" branch may go anywhere, so ending it there loses
// no order, and it spares porcupine the placements of an op open until the
// end of the history (a killed node's), which it must all try when the
// history is illegal: with a few of them that is out of any timeout.
func (m ledgerModel) ends(job []Op) []int64 {
	ends := make([]int64, len(job))
	for i, u := range job {
		ends[i] = u.Return
		if u.Result != OpUnknown {
			continue
		}
		end := int64(math.MaxInt64)
		if u.Return != 0 {
			end = u.Return
		}
		if u.Kind == OpWrite || m.fencing(u) {
			for _, w := range job {
				if w.Result != OpOK {
					continue
				}
				write := u.Kind == OpWrite && w.Kind == OpWrite && (w.Tick == u.Tick || w.Value >= u.Value)
				fence := m.fencing(u) && m.fencing(w) &&
					(w.Token > u.Token || m.rule == FenceOwner && w.Token == u.Token && w.Owner != u.Owner)
				if write || fence {
					end = min(end, w.Return)
				}
			}
		} else {
			end = u.Call
		}
		ends[i] = max(end, u.Call)
	}
	return ends
}

func (m ledgerModel) stepAll(states []ledgerState, op Op) []ledgerState {
	var out []ledgerState
	for _, s := range states {
		next, _ := m.step(s, op)
		for _, n := range next {
			if !slices.ContainsFunc(out, n.equal) {
				out = append(out, n)
			}
		}
	}
	return out
}

func describeOp(op Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %d's %s", op.Node, op.Kind)
	if op.Kind == OpRead && op.Result == OpOK || op.Kind == OpWrite {
		fmt.Fprintf(&b, " %d", op.Value)
	}
	fmt.Fprintf(&b, ", tick %d", op.Tick)
	if op.Fenced {
		fmt.Fprintf(&b, ", token %d", op.Token)
		if op.Owner != "" {
			fmt.Fprintf(&b, " of %s", shortOwner(op.Owner))
		}
	}
	if op.Result != OpOK {
		fmt.Fprintf(&b, ", %s", op.Result)
	}
	if op.Attempt != "" {
		fmt.Fprintf(&b, ", attempt %s", op.Attempt)
	}
	return b.String()
}

func (m ledgerModel) describeState(s ledgerState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ledger %d", s.value)
	if s.fenced {
		fmt.Fprintf(&b, ", fence %d", s.token)
		if s.owner != "" {
			fmt.Fprintf(&b, " of %s", shortOwner(s.owner))
		}
	}
	switch n := len(s.ticks); {
	case n == 0:
	case n <= 6:
		fmt.Fprintf(&b, ", ticks %v", s.ticks)
	default:
		fmt.Fprintf(&b, ", %d ticks %d…%d", n, s.ticks[0], s.ticks[n-1])
	}
	return b.String()
}

// shortOwner is enough of an owner's hash to tell holders apart.
func shortOwner(owner string) string {
	if len(owner) > 8 {
		return owner[:8]
	}
	return owner
}
