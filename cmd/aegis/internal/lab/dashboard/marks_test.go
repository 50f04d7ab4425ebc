package dashboard_test

import (
	"cmp"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// The mark check: what the timeline draws (read from the DOM the page
// built, each mark's data-* attributes) against what happened (the run's
// events, the store's grant history, the checker's harm). Its logic is
// checkMarks, tested on its own below; the Chromium tests feed it.

// pageMark is one mark the timeline drew: its data-* attributes.
type pageMark struct {
	Kind  string   `json:"kind"` // grant, successor, late-grant, expiry, write, harm, refused, other
	Lane  int      `json:"lane"` // the node whose lane it is drawn in
	Node  int      `json:"node"` // the node it is about
	Job   string   `json:"job"`
	Tick  int      `json:"tick"`
	Token string   `json:"token"`
	T     *float64 `json:"t"` // seconds on the events' clock; nil when not given
	// Prev is, on a successor or late grant, the token of the grant it
	// followed (the job's holder when it was granted).
	Prev string `json:"prev"`
	Harm string `json:"harm"` // on a harm mark: duplicate, lost-update or stale-accepted
	Red  bool   `json:"red"`  // drawn in the harm's red
}

// markFacts is what the marks are checked against.
type markFacts struct {
	Events []lab.Event
	// Grants is the store's grant history, where it keeps one: job →
	// token → when it was granted (seconds on the events' clock).
	Grants map[string]map[string]float64
	// Harms is the report's harm per job (the checker's and the store's).
	Harms map[string][]lab.Harm
	// NoGrants: the strategy's grants are not drawn (none, whose Locker
	// grants every node).
	NoGrants bool
}

// markTolerance is how far a drawn time may be from the time it stands
// for: the events' times are in milliseconds, the page's in floats.
const markTolerance = 0.0015

// grantTolerance is how far a grant's time (from the node's event) may be
// from the store's grant history's: the store's time is what the node
// reports, converted on the way (microseconds to the events'
// milliseconds, and the run's start recovered from the audit table's
// entered_ms to the millisecond).
const grantTolerance = 0.005

// readMarks reads the marks drawn under root (a CSS selector).
const readMarksJS = `Array.from(document.querySelectorAll(%q)).map((e) => {
  const d = e.dataset;
  const num = (v) => (v === undefined || v === '' ? 0 : Number(v));
  let kind = d.kind || (e.classList.contains('successor') ? 'successor' : 'other');
  const fill = getComputedStyle(e).fill || '';
  return { kind, lane: num(d.node), node: d.to ? num(d.to) : d.of ? num(d.of) : num(d.node), job: d.job || '', tick: num(d.tick),
    token: d.token || '', t: d.t === undefined ? null : Number(d.t), prev: d.prev || '', harm: d.harm || '', red: /rgb\(214, 47, 47\)|#d62f2f/i.test(fill) };
})`

func markSelector(root string) string { return root + ` [data-kind], ` + root + ` g.successor` }

// grantOf is a grant as the events tell it.
type grantOf struct {
	node        int
	job         string
	tick        int
	token       string
	start, said float64
	until, end  float64
}

// tokenCmp compares two tokens given as decimal strings.
func tokenCmp(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return cmp.Compare(x, y)
}

// checkMarks returns what is false in marks, each in words; none when
// every mark is true.
func checkMarks(marks []pageMark, f markFacts) []string {
	var bad []string
	badf := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	tok := func(t int64) string { return strconv.FormatInt(t, 10) }
	// The grants, from the acquired events, by job, node, tick and token
	// (a lease that does not bump its token grants one token again).
	grants := map[string]*grantOf{}
	key := func(job string, node, tick int, token string) string {
		return fmt.Sprintf("%s|%d|%d|%s", job, node, tick, token)
	}
	var order []*grantOf
	for _, e := range f.Events {
		switch e.Kind {
		case lab.EventAcquired:
			g := &grantOf{node: e.Node, job: e.Job, tick: e.Tick, token: tok(e.Token), start: cmp.Or(e.Granted, e.T), said: e.T, until: e.Until, end: math.Inf(1)}
			grants[key(e.Job, e.Node, e.Tick, g.token)] = g
			order = append(order, g)
		case lab.EventRenewed:
			if g := grants[key(e.Job, e.Node, e.Tick, tok(e.Token))]; g != nil && e.Until > 0 {
				g.until = e.Until
			}
		case lab.EventReleased, lab.EventLost:
			if g := grants[key(e.Job, e.Node, e.Tick, tok(e.Token))]; g != nil && math.IsInf(g.end, 1) {
				g.end = e.T
			}
		case lab.EventExited:
			for _, g := range order {
				if g.node == e.Node && math.IsInf(g.end, 1) {
					g.end = e.T
				}
			}
		}
	}
	// The job's holder when g was granted: the grant of another node held
	// then, the greatest token among several.
	prevOf := func(g *grantOf) *grantOf {
		var p *grantOf
		for _, o := range order {
			if o.job == g.job && o.node != g.node && o.start < g.start && o.end > g.start && (p == nil || tokenCmp(o.token, p.token) > 0) {
				p = o
			}
		}
		return p
	}
	near := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol }
	// Commits, by job: the ticks applied, and each commit's value against
	// the ledger's before it (the commit before, in the order they were
	// said), by node, tick and token.
	ticks := map[string]map[int]int{}
	type write struct{ value, before int64 }
	writes, last := map[string]write{}, map[string]int64{}
	for _, e := range f.Events {
		if e.Kind == lab.EventExecuted && e.Value != nil {
			if ticks[e.Job] == nil {
				ticks[e.Job] = map[int]int{}
			}
			ticks[e.Job][e.Tick]++
			writes[key(e.Job, e.Node, e.Tick, tok(e.Token))] = write{*e.Value, last[e.Job]}
			last[e.Job] = *e.Value
		}
	}
	harmed := map[string]map[lab.Harm]bool{}
	for _, m := range marks {
		where := fmt.Sprintf("%s mark of node%d (lane node%d) %s tick %d token %s", m.Kind, m.Node, m.Lane, m.Job, m.Tick, m.Token)
		switch m.Kind {
		case "grant", "successor", "late-grant", "same-token":
			if m.Lane != m.Node {
				badf("%s: drawn in another node's lane", where)
			}
			g := grants[key(m.Job, m.Node, m.Tick, m.Token)]
			if g == nil {
				badf("%s: no such grant in the events", where)
				continue
			}
			if m.T == nil || !near(*m.T, g.start, markTolerance) {
				badf("%s: drawn at %s, the grant's time is %.3f (its line said at %.3f)", where, at(m.T), g.start, g.said)
			}
			if st, ok := f.Grants[m.Job][m.Token]; ok && m.T != nil && !near(*m.T, st, grantTolerance) {
				badf("%s: drawn at %.3f, the store granted it at %.3f", where, *m.T, st)
			}
			p := prevOf(g)
			switch {
			case m.Kind == "successor" && (p == nil || tokenCmp(g.token, p.token) <= 0):
				badf("%s: a ▲ without a lesser token held before it (held before: %v)", where, p)
			case m.Kind == "late-grant" && (p == nil || tokenCmp(g.token, p.token) >= 0):
				badf("%s: called late without a greater token held before it", where)
			case m.Kind == "same-token" && (p == nil || tokenCmp(g.token, p.token) != 0):
				badf("%s: called a second grant of a token without one held before it", where)
			case m.Kind == "grant" && p != nil && g.token != "0" && p.token != "0":
				want := map[int]string{1: "successor", 0: "same-token", -1: "late-grant"}[tokenCmp(g.token, p.token)]
				if !slices.ContainsFunc(marks, func(o pageMark) bool {
					return o.Kind == want && o.Job == m.Job && o.Node == m.Node && o.Tick == m.Tick && o.Token == m.Token
				}) {
					badf("%s: granted while node%d held token %s: not drawn as a %s", where, p.node, p.token, want)
				}
			}
			if m.Prev != "" && (p == nil || p.token != m.Prev) {
				badf("%s: follows token %s by its mark, the events say %v", where, m.Prev, p)
			}
		case "expiry":
			g := grants[key(m.Job, m.Node, m.Tick, m.Token)]
			if g == nil || m.Lane != m.Node {
				badf("%s: no such grant of that node in the events", where)
				continue
			}
			if m.T == nil || !near(*m.T, g.until, markTolerance) || g.until >= g.end {
				badf("%s: drawn at %s, the lease expired at %.3f on the server and ended at %.3f", where, at(m.T), g.until, g.end)
			}
		case "write":
			if m.Red {
				badf("%s: a good write drawn red", where)
			}
			if ticks[m.Job][m.Tick] != 1 {
				badf("%s: drawn as applied once, the tick was committed %d times", where, ticks[m.Job][m.Tick])
			}
			if w, ok := writes[key(m.Job, m.Node, m.Tick, m.Token)]; ok && w.value <= w.before {
				badf("%s: drawn good, it wrote %d over %d: an update lost", where, w.value, w.before)
			}
			if len(f.Harms[m.Job]) > 0 && slices.Contains(f.Harms[m.Job], lab.HarmStaleAccepted) {
				badf("%s: drawn good in a job whose stale token was accepted", where)
			}
		case "harm":
			if !m.Red {
				badf("%s: a harm not drawn red", where)
			}
			if m.Harm == "" {
				badf("%s: a harm mark that names no harm", where)
			}
			for _, name := range strings.Fields(m.Harm) {
				h := lab.Harm(name)
				switch h {
				case lab.HarmDuplicate:
					if ticks[m.Job][m.Tick] < 2 {
						badf("%s: called a duplicate, the tick was committed %d times", where, ticks[m.Job][m.Tick])
					}
				case lab.HarmLostUpdate:
					if w, ok := writes[key(m.Job, m.Node, m.Tick, m.Token)]; !ok || w.value > w.before {
						badf("%s: called a lost update, it wrote %d over %d", where, w.value, w.before)
					}
				case lab.HarmStaleAccepted:
				default:
					badf("%s: harm %q is no harm the report names", where, name)
				}
				if !reportHas(f.Harms[m.Job], h) {
					badf("%s: %s drawn, the report's harms of %s are %v", where, name, m.Job, f.Harms[m.Job])
				}
				if harmed[m.Job] == nil {
					harmed[m.Job] = map[lab.Harm]bool{}
				}
				harmed[m.Job][h] = true
			}
		}
	}
	// Every grant of the events is drawn.
	for _, g := range order {
		if !f.NoGrants && !slices.ContainsFunc(marks, func(m pageMark) bool {
			return m.Kind == "grant" && m.Job == g.job && m.Token == g.token && m.Node == g.node
		}) {
			badf("node%d's grant of %s tick %d (token %s) is not drawn", g.node, g.job, g.tick, g.token)
		}
	}
	// Every harm the report names is drawn.
	for job, hs := range f.Harms {
		for _, h := range hs {
			want := h
			if h == lab.HarmRetryDuplicate || h == lab.HarmRefire {
				want = lab.HarmDuplicate
			}
			if !harmed[job][want] {
				badf("%s: the report names %s, no red mark draws it", job, h)
			}
		}
	}
	return bad
}

// at is a mark's time in words.
func at(t *float64) string {
	if t == nil {
		return "no time"
	}
	return fmt.Sprintf("%.3f", *t)
}

// reportHas tells whether the report's harms hs include what a mark calls
// h: a duplicate is any tick applied twice (by a retry, a re-fire or
// neither).
func reportHas(hs []lab.Harm, h lab.Harm) bool {
	if h == lab.HarmDuplicate {
		return slices.ContainsFunc(hs, func(x lab.Harm) bool {
			return x == lab.HarmDuplicate || x == lab.HarmRetryDuplicate || x == lab.HarmRefire
		})
	}
	return slices.Contains(hs, h)
}

// recordedLateGrant is the case: pg-lease fenced, node1 paused
// (4.0 s to 7.0 s) between its grant of invoice-export's tick 5 (token 5,
// granted at 4.001 s by the store) and its acquired line, which the lab
// stamped at 7.034 s; node2 was granted token 6 at 6.012 s, once node1's
// lease had expired (6.001 s), and committed tick 7; node1's late write
// was refused. Ticks 5 and 6 were missed: 6 because node1's lease was
// held.
func recordedLateGrant() ([]lab.Event, map[string]map[string]float64) {
	v := func(n int64) *int64 { return &n }
	const job = "invoice-export"
	var evs []lab.Event
	for t := 1; t <= 8; t++ {
		evs = append(evs, lab.Event{T: float64(t - 1), Kind: lab.EventTick, Tick: t})
	}
	// Ticks 1 to 4: node3, tokens 1 to 4.
	for t := 1; t <= 4; t++ {
		at := float64(t-1) + 0.01
		att := fmt.Sprintf("3.1.%d", t)
		evs = append(evs,
			lab.Event{T: at, Kind: lab.EventAcquired, Node: 3, Job: job, Tick: t, Token: int64(t), Granted: at - 0.005, Until: at + 1.995},
			lab.Event{T: at + 0.001, Kind: lab.EventEnter, Node: 3, Job: job, Tick: t, Token: int64(t), Attempt: att},
			lab.Event{T: at + 0.01, Kind: lab.EventEntered, Node: 3, Job: job, Tick: t, Token: int64(t), Attempt: att, Value: v(int64(t - 1))},
			lab.Event{T: at + 0.31, Kind: lab.EventWriting, Node: 3, Job: job, Tick: t, Token: int64(t), Attempt: att},
			lab.Event{T: at + 0.32, Kind: lab.EventExecuted, Node: 3, Job: job, Tick: t, Token: int64(t), Attempt: att, Value: v(int64(t))},
			lab.Event{T: at + 0.33, Kind: lab.EventReleased, Node: 3, Job: job, Tick: t, Token: int64(t)})
	}
	evs = append(evs,
		lab.Event{T: 4.0, Kind: lab.EventChaos, Node: 1, Detail: "pause:holder@2s+3s: node1 paused (SIGSTOP)"},
		lab.Event{T: 5.4, Kind: lab.EventMissed, Job: job, Tick: 5, Detail: "invoice-export tick 5 missed"},
		lab.Event{T: 6.012, Kind: lab.EventAcquired, Node: 2, Job: job, Tick: 7, Token: 6, Granted: 6.008, Until: 8.007},
		lab.Event{T: 6.013, Kind: lab.EventEnter, Node: 2, Job: job, Tick: 7, Token: 6, Attempt: "2.1.1"},
		lab.Event{T: 6.02, Kind: lab.EventEntered, Node: 2, Job: job, Tick: 7, Token: 6, Attempt: "2.1.1", Value: v(4)},
		lab.Event{T: 6.32, Kind: lab.EventWriting, Node: 2, Job: job, Tick: 7, Token: 6, Attempt: "2.1.1"},
		lab.Event{T: 6.33, Kind: lab.EventExecuted, Node: 2, Job: job, Tick: 7, Token: 6, Attempt: "2.1.1", Value: v(5)},
		lab.Event{T: 6.34, Kind: lab.EventReleased, Node: 2, Job: job, Tick: 7, Token: 6},
		lab.Event{T: 6.4, Kind: lab.EventMissed, Job: job, Tick: 6, Detail: "invoice-export tick 6 missed"},
		lab.Event{T: 7.0, Kind: lab.EventHealed, Node: 1, Detail: "node1 resumed (SIGCONT)"},
		// The late line: granted at 4.001, said at 7.034.
		lab.Event{T: 7.034, Kind: lab.EventAcquired, Node: 1, Job: job, Tick: 5, Token: 5, Granted: 4.001, Until: 6.001},
		lab.Event{T: 7.035, Kind: lab.EventEnter, Node: 1, Job: job, Tick: 5, Token: 5, Attempt: "1.1.5"},
		lab.Event{T: 7.04, Kind: lab.EventStale, Node: 1, Job: job, Tick: 5, Token: 5, Attempt: "1.1.5", Held: 6, Detail: "read: token 5 refused, the store holds 6"},
		lab.Event{T: 7.05, Kind: lab.EventReleased, Node: 1, Job: job, Tick: 5, Token: 5},
		lab.Event{T: 7.01, Kind: lab.EventAcquired, Node: 3, Job: job, Tick: 8, Token: 7, Granted: 7.005, Until: 9.005},
		lab.Event{T: 7.011, Kind: lab.EventEnter, Node: 3, Job: job, Tick: 8, Token: 7, Attempt: "3.1.9"},
		lab.Event{T: 7.02, Kind: lab.EventEntered, Node: 3, Job: job, Tick: 8, Token: 7, Attempt: "3.1.9", Value: v(5)},
		lab.Event{T: 7.32, Kind: lab.EventWriting, Node: 3, Job: job, Tick: 8, Token: 7, Attempt: "3.1.9"},
		lab.Event{T: 7.33, Kind: lab.EventExecuted, Node: 3, Job: job, Tick: 8, Token: 7, Attempt: "3.1.9", Value: v(6)},
		lab.Event{T: 7.34, Kind: lab.EventReleased, Node: 3, Job: job, Tick: 8, Token: 7},
	)
	slices.SortStableFunc(evs, func(a, b lab.Event) int { return cmp.Compare(a.T, b.T) })
	store := map[string]map[string]float64{job: {"1": 0.005, "2": 1.005, "3": 2.005, "4": 3.005, "5": 4.001, "6": 6.008, "7": 7.005}}
	return evs, store
}

// drawRecordedJS draws a recorded run (its configuration view, its events
// as the stream's JSON and its report) with the page's own timeline into
// a panel of its own, 1366 px wide, and returns the panel's selector.
const drawRecordedJS = `(() => {
  const el = document.createElement('div');
  el.id = %[1]q;
  el.style.width = '1300px';
  el.innerHTML = '<div class="lanes"></div><div class="extra"></div>';
  document.body.appendChild(el);
  const rs = { id: %[1]q, events: parse(%[2]q), status: null, end: { report: %[4]s }, view: { config: %[3]s }, panel: el, zoom: 'fit' };
  drawLanes(rs);
  el.querySelector('.extra').insertAdjacentHTML('beforeend', causeNotes(rs.derived, rs.view.config.tick_s)); // as drawRun does
  return '#' + el.id;
})()`

// recordedConfig is the configuration view of the recorded run.
const recordedConfig = `{"strategy":"pg-lease","fence":true,"fenced":true,"fenceable":true,"nodes":3,"ticks":8,"tick_s":1,"tick":"1s","ttl":"2s","work":"300ms",` +
	`"jobs":[{"name":"invoice-export","every":"1s","every_s":1,"work":"300ms","keep_alive":true}],"chaos":["pause:holder@2s+3s"],"standby":0}`

// drawRecorded draws events in p's page and reads the marks back.
func drawRecorded(t *testing.T, p *page, id string, events []lab.Event, config, report string) []pageMark {
	t.Helper()
	b, err := json.Marshal(events)
	require.NoError(t, err)
	sel := p.str(fmt.Sprintf(drawRecordedJS, id, string(b), config, report))
	return readMarks(t, p, sel)
}

func readMarks(t *testing.T, p *page, root string) []pageMark {
	t.Helper()
	marks, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]pageMark](fmt.Sprintf(readMarksJS, markSelector(root))))
	require.NoError(t, err, "read the marks; %s", p.describe())
	return marks
}

// recordedNoQuorum is Redlock unfenced whose first two ticks nobody ran:
// every node's acquire found no quorum.
func recordedNoQuorum() []lab.Event {
	v := func(n int64) *int64 { return &n }
	const job = "invoice-export"
	var evs []lab.Event
	for t := 1; t <= 2; t++ {
		evs = append(evs, lab.Event{T: float64(t - 1), Kind: lab.EventTick, Tick: t})
		for n := 1; n <= 3; n++ {
			evs = append(evs, lab.Event{T: float64(t-1) + 0.1, Kind: lab.EventError, Node: n, Job: job, Tick: t,
				Detail: "schedule: redlock: 0 of 5 nodes agreed (3 needed): no answer within 100ms"})
		}
	}
	evs = append(evs, lab.Event{T: 2.0, Kind: lab.EventTick, Tick: 3},
		lab.Event{T: 2.01, Kind: lab.EventAcquired, Node: 1, Job: job, Tick: 3, Token: 1, Granted: 2.005, Until: 4.005},
		lab.Event{T: 2.011, Kind: lab.EventEnter, Node: 1, Job: job, Tick: 3, Token: 1, Attempt: "1.1.1"},
		lab.Event{T: 2.02, Kind: lab.EventEntered, Node: 1, Job: job, Tick: 3, Token: 1, Attempt: "1.1.1", Value: v(0)},
		lab.Event{T: 2.32, Kind: lab.EventWriting, Node: 1, Job: job, Tick: 3, Token: 1, Attempt: "1.1.1"},
		lab.Event{T: 2.33, Kind: lab.EventExecuted, Node: 1, Job: job, Tick: 3, Token: 1, Attempt: "1.1.1", Value: v(1)},
		lab.Event{T: 2.34, Kind: lab.EventReleased, Node: 1, Job: job, Tick: 3, Token: 1},
		lab.Event{T: 2.4, Kind: lab.EventMissed, Job: job, Tick: 1},
		lab.Event{T: 2.5, Kind: lab.EventError, Node: 2, Detail: "schedule: unhandled: the catalog's row of a deleted job"},
		lab.Event{T: 3.4, Kind: lab.EventMissed, Job: job, Tick: 2})
	return evs
}

// Recorded runs drawn by the page's timeline, read back from its DOM. A
// pause between a node's grant and its acquired line (SIGSTOP lands where
// it lands) must not move the grant: the run. Missed ticks say
// why.
func TestMarksRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx, exceptions := chromium.Start(t, 120*time.Second)
	p := &page{t: t, h: h, ctx: ctx, exceptions: exceptions, budget: 120 * time.Second}
	// The page's scripts and its info; the servers' availability is not needed.
	p.do("open the page", chromedp.Navigate(h.url), chromedp.WaitReady(chromedp.CSS(`#strategies input[value="none"]`)))
	events, store := recordedLateGrant()
	marks := drawRecorded(t, p, "recorded-late-grant", events, recordedConfig, `{"checker":"ok","harms":[]}`)
	require.Empty(t, checkMarks(marks, markFacts{Events: events, Grants: store, Harms: map[string][]lab.Harm{}}), "marks: %+v", marks)
	find := func(kind string, node int, token string) *pageMark {
		for i, m := range marks {
			if m.Kind == kind && m.Node == node && m.Token == token {
				return &marks[i]
			}
		}
		return nil
	}
	g := find("grant", 1, "5")
	require.NotNil(t, g, "node1's lease t5, held during its pause, is drawn: %+v", marks)
	require.InDelta(t, 4.001, *g.T, markTolerance, "at the store's grant time, not the wake-up's 7.034")
	s := find("successor", 2, "6")
	require.NotNil(t, s, "node2's t6 is a successor of node1's t5: %+v", marks)
	require.Equal(t, 2, s.Lane, "▲ t6 in node2's own lane")
	require.Nil(t, find("successor", 1, "5"), "node1's t5 is no successor of anything")
	e := find("expiry", 1, "5")
	require.NotNil(t, e, "node1's t5 expired on the server: %+v", marks)
	require.InDelta(t, 6.001, *e.T, markTolerance)
	// Ticks 5 and 6 were missed because node1, which held the lease, was
	// paused: the columns and the run's notes say so.
	for _, tick := range []string{"5", "6"} {
		col := `#recorded-late-grant rect.col.missed[data-tick="` + tick + `"]`
		require.Equal(t, "paused", p.str(`document.querySelector('`+col+`').dataset.cause`), "tick %s's cause", tick)
		require.Contains(t, p.str(`document.querySelector('`+col+`').textContent`), "node1", "tick %s's tooltip names the holder", tick)
		require.Contains(t, p.str(`document.querySelector('#recorded-late-grant .notes.causes li[data-tick="`+tick+`"]').textContent`), "paused", "the run's notes say why tick %s was missed", tick)
	}

	// Redlock unfenced, its first two ticks missed for want of a quorum:
	// the grey columns say so, and the nodes' errors reach the run's notes.
	quorum := recordedNoQuorum()
	noQuorumConfig := strings.NewReplacer(`"pg-lease","fence":true,"fenced":true`, `"redlock","fence":false,"fenced":false`, `"ticks":8`, `"ticks":3`, `"pause:holder@2s+3s"`, ``).Replace(recordedConfig)
	marks = drawRecorded(t, p, "recorded-no-quorum", quorum, noQuorumConfig, `{"checker":"ok","harms":[]}`)
	require.Empty(t, checkMarks(marks, markFacts{Events: quorum, Harms: map[string][]lab.Harm{}}), "marks: %+v", marks)
	for _, tick := range []string{"1", "2"} {
		col := `#recorded-no-quorum rect.col.missed[data-tick="` + tick + `"]`
		require.Equal(t, "no quorum", p.str(`document.querySelector('`+col+`').dataset.cause`), "tick %s's cause", tick)
		require.Contains(t, p.str(`document.querySelector('#recorded-no-quorum .notes.causes li[data-tick="`+tick+`"]').textContent`), "0 of 5 nodes agreed", "the run's notes say why tick %s was missed", tick)
	}
	require.Contains(t, p.str(`document.querySelector('#recorded-no-quorum .notes.causes li.nodeerror').textContent`), "node2: schedule: unhandled", "an error of no tick reaches the notes")

	// A promotion of the standby is a fault of the whole run: a line
	// across every lane, labelled, its event's words in its tooltip.
	promoted := slices.Clone(quorum)
	promoted = append(promoted, lab.Event{T: 2.6, Kind: lab.EventChaos,
		Detail: "promote:standby@2.5s: promoted standby at 2.600s, the switchover begun at 2.500s: the primary 127.0.0.1:5432 (pid 7) stopped"})
	promotedConfig := strings.Replace(noQuorumConfig, `"standby":0`, `"standby":1`, 1)
	marks = drawRecorded(t, p, "recorded-promotion", promoted, promotedConfig, `{"checker":"ok","harms":[]}`)
	require.Empty(t, checkMarks(marks, markFacts{Events: promoted, Harms: map[string][]lab.Harm{}}), "marks: %+v", marks)
	require.Equal(t, "standby promoted", p.str(`document.querySelector('#recorded-promotion g.labline text').textContent`))
	require.Contains(t, p.str(`document.querySelector('#recorded-promotion g.labline title').textContent`), "promoted standby at 2.600s")

	// A long run followed to its end while it goes opens at its start once
	// finished (the Redlock run opened at tick 4, its pause's label
	// cut); after that it stays where the user scrolls it.
	scroll := p.str(fmt.Sprintf(`(() => {
  const el = document.createElement('div');
  el.style.width = '1300px';
  el.innerHTML = '<div class="lanes"></div><div class="extra"></div>';
  document.body.appendChild(el);
  const events = [];
  for (let t = 1; t <= 40; t++) events.push({ t: t - 1, kind: 'tick', tick: t });
  const rs = { id: 'long', events, status: { elapsed_s: 39.5 }, end: null, view: { config: Object.assign(%s, { ticks: 40 }) }, panel: el, zoom: 'fit' };
  drawLanes(rs);
  const going = el.querySelector('.plotbox').scrollLeft;
  rs.end = { report: { checker: 'ok', harms: [] } };
  drawLanes(rs);
  const done = el.querySelector('.plotbox').scrollLeft;
  el.querySelector('.plotbox').scrollLeft = 100;
  drawLanes(rs);
  return [going, done, el.querySelector('.plotbox').scrollLeft].join(' ');
})()`, recordedConfig))
	var going, done, kept int
	_, err := fmt.Sscanf(scroll, "%d %d %d", &going, &done, &kept)
	require.NoError(t, err, scroll)
	require.Positive(t, going, "while it goes the plot follows its end")
	require.Zero(t, done, "finished, it opens at its start")
	require.Equal(t, 100, kept, "then it stays where the user put it")
}

var markPresets = flag.String("mark-presets", "nightly-reconciliation", "the presets TestMarksOfPresets runs for real: comma-separated names, or all (make lab-marks)")

// The mark test: each preset run for real (as many at once as the
// dashboard admits), each of its runs shown by the page, every mark the
// page drew checked against the run's events, the report's harm and, for
// pg-lease and sqlite, the store's grant history read with SQL. make test
// runs the preset (nightly-reconciliation: pg-lease fenced, the
// holder paused); make lab-marks runs every preset.
func TestMarksOfPresets(t *testing.T) {
	t.Parallel()
	var names []string
	for _, sc := range lab.Scenarios {
		if *markPresets == "all" || slices.Contains(strings.Split(*markPresets, ","), sc.Name) {
			names = append(names, sc.Name)
		}
	}
	require.NotEmpty(t, names, "-mark-presets %q names no preset", *markPresets)
	budget := 10 * time.Minute
	if len(names) == 1 {
		budget = 3 * time.Minute
	}
	testenv.Reserve(t, min(testenv.Slots(), 1+len(names)), "presets run for real and a browser")
	// A preset with a hot standby needs the lab's own PostgreSQL: it runs
	// on a session of its own, after the others.
	var shared, own []string
	for _, name := range names {
		sc, _ := lab.LookupScenario(name)
		if slices.ContainsFunc(sc.Runs, func(c lab.Config) bool { return c.Standby > 0 }) {
			own = append(own, name)
		} else {
			shared = append(shared, name)
		}
	}
	deadline := time.Now().Add(budget)
	if len(shared) > 0 {
		pg := testenv.PostgresURL(t)
		// The lab's own Redis: the Redis presets fail it over and restart it.
		h := newHarnessOn(t, runner.Servers{PostgresURL: pg, EtcdEndpoints: testenv.EtcdEndpoints(t), ZKServers: testenv.ZKServers(t), NATSURLs: testenv.NATSURLs(t)}, nil)
		db, err := sql.Open("pgx", pg)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		runPresets(t, h, db, shared, deadline)
	}
	if len(own) > 0 {
		h := newHarnessOn(t, runner.Servers{EtcdEndpoints: testenv.EtcdEndpoints(t), ZKServers: testenv.ZKServers(t), NATSURLs: testenv.NATSURLs(t)}, nil)
		runPresets(t, h, nil, own, deadline)
	}
}

// runPresets runs the presets names on h's dashboard, as many at once as
// it admits, shows each group in a browser of its own once done and checks
// its marks; db is the store of record when the test can read it.
func runPresets(t *testing.T, h *harness, db *sql.DB, names []string, deadline time.Time) {
	t.Helper()
	budget := time.Until(deadline)
	ctx, exceptions := chromium.Start(t, budget)
	p := &page{t: t, h: h, ctx: ctx, exceptions: exceptions, budget: budget}
	p.do("open the page", chromedp.Navigate(h.url), chromedp.WaitReady(chromedp.CSS(`#strategies input[value="none"]`)))

	// Start what the dashboard admits; check each group once done.
	pending, running := slices.Clone(names), []string{}
	for len(pending) > 0 || len(running) > 0 {
		for i := 0; i < len(pending); {
			code, b := h.do(http.MethodPost, "/api/groups", dashboard.GroupRequest{Scenario: pending[i]})
			if code == http.StatusConflict && len(running) > 0 {
				i++ // its servers or its slots are taken: after the next group
				continue
			}
			require.Equal(t, http.StatusCreated, code, "start preset %s: %s", pending[i], b)
			var g groupView
			require.NoError(t, json.Unmarshal(b, &g))
			running = append(running, g.ID)
			pending = slices.Delete(pending, i, i+1)
		}
		g := h.waitGroup(running[0], time.Until(deadline))
		running = running[1:]
		checkGroupMarks(t, p, h, db, g)
	}
}

// checkGroupMarks shows group g on the page and checks the marks of each
// of its runs.
func checkGroupMarks(t *testing.T, p *page, h *harness, db *sql.DB, g groupView) {
	t.Helper()
	p.do("show group "+g.ID, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`app.current = %q; app.pinned = true; render();`, g.ID)))
	for _, rv := range g.Runs {
		if rv.ID == "" {
			t.Logf("preset %s: run %d (%s) did not run here: %s%s", g.Scenario, rv.Index, rv.Config.Strategy, rv.Unavailable, rv.Error)
			continue
		}
		root := fmt.Sprintf(`#runs [data-run=%q]`, rv.ID)
		p.until("run "+rv.ID+" drawn done", fmt.Sprintf(`document.querySelector('%s[data-state="done"] .lanes svg.plot')`, root), 60*time.Second)
		rep := h.runReport(t, rv.ID)
		marks := readMarks(t, p, root)
		f := markFacts{Events: rep.Events, Harms: map[string][]lab.Harm{}, NoGrants: rv.Config.Strategy == "none"}
		for _, j := range rep.Jobs {
			f.Harms[j.Name] = j.Harms
		}
		if rv.Config.Strategy == "pg-lease" || rv.Config.Strategy == "sqlite" {
			require.NotNil(t, db, "run %s: the test reads the grant history of a store it knows", rv.ID)
			f.Grants = storeGrants(t, h, db, rv.ID, rv.Config.Strategy, rep)
			require.NotEmpty(t, f.Grants, "run %s: the store's grant history has the run's grants", rv.ID)
		}
		bad := checkMarks(marks, f)
		require.Empty(t, bad, "preset %s, run %s (%s): what its marks say that is not so\n%s", g.Scenario, rv.ID, rv.Config.Strategy, dump(rep.Events))
		t.Logf("preset %s, run %s (%s): %d marks true", g.Scenario, rv.ID, rv.Config.Strategy, len(marks))
	}
}

// storeGrants reads run's grants from the store's grant history with SQL
// (job → token → seconds on the events' clock). The events' clock is the
// run's: its start is recovered from the audit rows' entered_ms, the
// enter events' times to the millisecond.
func storeGrants(t *testing.T, h *harness, db *sql.DB, run, strategy string, rep lab.Report) map[string]map[string]float64 {
	t.Helper()
	entered := map[string]float64{}
	for _, e := range rep.Events {
		if e.Kind == lab.EventEnter {
			entered[e.Attempt] = e.T
		}
	}
	rows, err := db.Query(`SELECT attempt, entered_ms FROM aegis_lab_audit WHERE run = $1 AND entered_ms > 0`, run)
	require.NoError(t, err)
	var offsets []float64
	for rows.Next() {
		var attempt string
		var ms int64
		require.NoError(t, rows.Scan(&attempt, &ms))
		if at, ok := entered[attempt]; ok {
			offsets = append(offsets, float64(ms)/1e3-at)
		}
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, offsets, "run %s: audit rows of its enter events", run)
	slices.Sort(offsets)
	start := offsets[len(offsets)/2]

	grants := map[string]map[string]float64{}
	read := func(q *sql.DB, query string, job string) {
		rows, err := q.Query(query, lab.Namespace(run)+"/"+job)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var token int64
			var at float64
			require.NoError(t, rows.Scan(&token, &at))
			if grants[job] == nil {
				grants[job] = map[string]float64{}
			}
			grants[job][strconv.FormatInt(token, 10)] = at - start
		}
		require.NoError(t, rows.Err())
	}
	var q *sql.DB
	var query string
	if strategy == "pg-lease" {
		q, query = db, `SELECT token, extract(epoch FROM granted_at)::float8 FROM aegis_lease_grant WHERE key = $1`
	} else {
		lite, err := sqlitelease.Open(filepath.Join(h.dir, run+"-lease.db"))
		require.NoError(t, err)
		defer lite.Close()
		q, query = lite, `SELECT token, granted_ms / 1000.0 FROM aegis_lease_grant WHERE key = $1`
	}
	for _, j := range rep.Jobs {
		read(q, query, j.Name)
	}
	return grants
}

// checkMarks without a browser: the recorded run's true marks pass, and
// each false one is named.
func TestCheckMarks(t *testing.T) {
	t.Parallel()
	events, store := recordedLateGrant()
	const job = "invoice-export"
	f := func(v float64) *float64 { return &v }
	var truth []pageMark
	for _, e := range events {
		switch e.Kind {
		case lab.EventAcquired:
			truth = append(truth, pageMark{Kind: "grant", Lane: e.Node, Node: e.Node, Job: job, Tick: e.Tick, Token: strconv.FormatInt(e.Token, 10), T: f(e.Granted)})
		case lab.EventExecuted:
			truth = append(truth, pageMark{Kind: "write", Lane: e.Node, Node: e.Node, Job: job, Tick: e.Tick, Token: strconv.FormatInt(e.Token, 10)})
		}
	}
	truth = append(truth,
		pageMark{Kind: "successor", Lane: 2, Node: 2, Job: job, Tick: 7, Token: "6", Prev: "5", T: f(6.008)},
		pageMark{Kind: "successor", Lane: 3, Node: 3, Job: job, Tick: 8, Token: "7", Prev: "5", T: f(7.005)},
		pageMark{Kind: "expiry", Lane: 1, Node: 1, Job: job, Tick: 5, Token: "5", T: f(6.001)})
	facts := markFacts{Events: events, Grants: store, Harms: map[string][]lab.Harm{}}
	require.Empty(t, checkMarks(truth, facts))

	with := func(change func([]pageMark) []pageMark) []pageMark { return change(slices.Clone(truth)) }
	for _, c := range []struct {
		name  string
		marks []pageMark
		facts markFacts
		want  string
	}{
		{"the grant at the wake-up", with(func(ms []pageMark) []pageMark {
			for i := range ms {
				if ms[i].Kind == "grant" && ms[i].Token == "5" {
					ms[i].T = f(7.034)
				}
			}
			return ms
		}), facts, "drawn at 7.034, the grant's time is 4.001"},
		{"the store's grant time", truth, markFacts{Events: events, Grants: map[string]map[string]float64{job: {"5": 4.2}}}, "the store granted it at 4.200"},
		{"a ▲ in the holder's lane", append(slices.Clone(truth), pageMark{Kind: "successor", Lane: 2, Node: 1, Job: job, Tick: 5, Token: "5", T: f(4.001)}), facts, "drawn in another node's lane"},
		{"a ▲ with a lower token", append(slices.Clone(truth), pageMark{Kind: "successor", Lane: 1, Node: 1, Job: job, Tick: 5, Token: "5", T: f(4.001)}), facts, "a ▲ without a lesser token held before it"},
		{"a successor not drawn", slices.DeleteFunc(slices.Clone(truth), func(m pageMark) bool { return m.Kind == "successor" && m.Token == "6" }), facts, "not drawn as a successor"},
		{"an expiry off its until", with(func(ms []pageMark) []pageMark { ms[len(ms)-1].T = f(7.0); return ms }), facts, "the lease expired at 6.001"},
		{"a grant not drawn", slices.DeleteFunc(slices.Clone(truth), func(m pageMark) bool { return m.Kind == "grant" && m.Token == "1" }), facts, "node3's grant of invoice-export tick 1 (token 1) is not drawn"},
		{"a green write of a tick applied twice", truth, markFacts{Events: append(slices.Clone(events),
			lab.Event{T: 7.5, Kind: lab.EventExecuted, Node: 1, Job: job, Tick: 8, Token: 5, Value: new(int64)}), Grants: store, Harms: map[string][]lab.Harm{}}, "drawn as applied once, the tick was committed 2 times"},
		{"a harm the report names, not drawn", truth, markFacts{Events: events, Grants: store, Harms: map[string][]lab.Harm{job: {lab.HarmLostUpdate}}}, "the report names lost-update, no red mark draws it"},
		{"a harm not red", append(slices.Clone(truth), pageMark{Kind: "harm", Lane: 3, Node: 3, Job: job, Tick: 8, Token: "7", Harm: "lost-update"}),
			markFacts{Events: events, Grants: store, Harms: map[string][]lab.Harm{job: {lab.HarmLostUpdate}}}, "a harm not drawn red"},
		{"a late write that lost an update drawn green", append(slices.Clone(truth), pageMark{Kind: "write", Lane: 1, Node: 1, Job: job, Tick: 5, Token: "5"}), markFacts{Events: append(slices.Clone(events),
			lab.Event{T: 7.6, Kind: lab.EventExecuted, Node: 1, Job: job, Tick: 5, Token: 5, Value: new(int64(5))}), Grants: store, Harms: map[string][]lab.Harm{}}, "drawn good, it wrote 5 over 6: an update lost"},
		{"a good write called a lost update", append(slices.Clone(truth), pageMark{Kind: "harm", Lane: 3, Node: 3, Job: job, Tick: 8, Token: "7", Harm: "lost-update", Red: true}),
			markFacts{Events: events, Grants: store, Harms: map[string][]lab.Harm{job: {lab.HarmLostUpdate}}}, "called a lost update, it wrote 6 over 5"},
		{"a harm the report does not name", append(slices.Clone(truth), pageMark{Kind: "harm", Lane: 3, Node: 3, Job: job, Tick: 8, Token: "7", Harm: "lost-update", Red: true}), facts, "lost-update drawn, the report's harms"},
	} {
		bad := checkMarks(c.marks, c.facts)
		require.NotEmpty(t, bad, c.name)
		require.Contains(t, strings.Join(bad, "\n"), c.want, c.name)
	}
}
