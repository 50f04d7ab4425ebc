package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// page is the dashboard open in headless Chromium, as a student uses it.
type page struct {
	t          *testing.T
	h          *harness
	ctx        context.Context
	exceptions func() []string
	budget     time.Duration
}

// openPage opens the dashboard of h in a browser of its own, bounded by
// budget, and waits until the page knows which strategies are available.
func openPage(t *testing.T, h *harness, budget time.Duration) *page {
	t.Helper()
	ctx, exceptions := chromium.Start(t, budget)
	p := &page{t: t, h: h, ctx: ctx, exceptions: exceptions, budget: budget}
	p.do("open the page", chromedp.Navigate(h.url), chromedp.WaitReady(chromedp.CSS(`#strategies input[value="none"]`)),
		chromedp.WaitReady(chromedp.CSS(`#strategytable td.avail.ok`)))
	return p
}

// describe is what the page shows, for a failure.
func (p *page) describe() string {
	text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector('#runs') ? document.querySelector('#runs').innerText.slice(0, 6000) : ''`))
	return fmt.Sprintf("the runs on the page:\n%s\nJavaScript exceptions: %v", text, p.exceptions())
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	err := chromedp.Do(p.ctx, steps...)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		p.t.Fatalf("%s: not done within the test's %s budget; %s", what, p.budget, p.describe())
	}
	require.NoError(p.t, err, "%s; %s", what, p.describe())
}

// click clicks the element the way a script does (element.click()): a
// mouse click at coordinates found a moment before can land on the row
// above when the page redraws in between.
func (p *page) click(sel string) chromedp.Action[chromedp.Void] { return jsClick(sel) }

// jsClick clicks the element sel selects as a script does, failing if
// there is none or it is disabled.
func jsClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error('no element ' + %q); if (e.disabled) throw new Error(%q + ' is disabled'); e.click(); })()`, sel, sel, sel))
}

func (p *page) str(js string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](js))
	require.NoError(p.t, err, "%s", js)
	return v
}

func (p *page) count(sel string) int {
	p.t.Helper()
	n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	require.NoError(p.t, err)
	return n
}

func (p *page) texts(sel string) []string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map((e) => e.textContent)`, sel)))
	require.NoError(p.t, err)
	return v
}

// until waits, at most d, for the JavaScript condition to hold; the
// failure says what it waited for and what the page shows.
func (p *page) until(what, cond string, d time.Duration) {
	p.t.Helper()
	js := fmt.Sprintf(`new Promise((resolve, reject) => { const t0 = Date.now(); const f = () => { let ok = false; try { ok = !!(%s); } catch (e) {} `+
		`if (ok) resolve(); else if (Date.now() - t0 > %d) reject(new Error('not within %s')); else setTimeout(f, 50); }; f(); })`, cond, d.Milliseconds(), d)
	_, err := chromedp.Run(p.ctx, chromedp.Evaluate[chromedp.Void](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("%s: %v; %s", what, err, p.describe())
	}
}

// form fills the run form: the strategies checked (the others not), the
// fence, and the parameters.
func (p *page) form(strategies []string, fence string, nodes, tick, ttl, work, duration string) {
	p.t.Helper()
	js := fmt.Sprintf(`for (const b of document.querySelectorAll('#strategies input')) b.checked = %s.includes(b.value); `+
		`document.querySelector('input[name="fence"][value="%s"]').checked = true; `+
		`document.querySelector('#nodes').value = %q; document.querySelector('#tick').value = %q; document.querySelector('#ttl').value = %q; `+
		`document.querySelector('#work').value = %q; document.querySelector('#duration').value = %q; 'ok'`,
		jsList(strategies), fence, nodes, tick, ttl, work, duration)
	require.Equal(p.t, "ok", p.str(js))
}

func jsList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ",") + "]"
}

// shoot writes a screenshot of the element into docs/ with -screenshots.
func (p *page) shoot(sel, name string) {
	p.t.Helper()
	if !*screenshots {
		return
	}
	p.do("wait for a frame", chromedp.Evaluate[chromedp.Void](`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))`, chromedp.EvalAwaitPromise))
	png, err := chromedp.Run(p.ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	require.NoError(p.t, err)
	path := filepath.Join("..", "..", "..", "..", "..", "docs", name)
	require.NoError(p.t, os.WriteFile(path, png, 0o644))
	p.t.Logf("wrote %s", path)
}

// shootView writes a screenshot of the window, scrolled to the element,
// into docs/ with -screenshots.
func (p *page) shootView(sel, name string) {
	p.t.Helper()
	if !*screenshots {
		return
	}
	p.do("scroll and wait for a frame", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).scrollIntoView(); new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))`, sel), chromedp.EvalAwaitPromise))
	png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
	require.NoError(p.t, err)
	path := filepath.Join("..", "..", "..", "..", "..", "docs", name)
	require.NoError(p.t, os.WriteFile(path, png, 0o644))
	p.t.Logf("wrote %s", path)
}

// The most runs the page allows at once, side by side: the page keeps one
// event stream, so its requests still answer (the page's info, a Pause
// that waits for a holder), and Stop ends them all.
func TestEndToEndMaxRuns(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, testenv.Slots(), "a browser and twelve runs: the whole machine")
	h := newHarness(t, nil)
	p := openPage(t, h, 240*time.Second)
	offered := p.count(`#strategies input`) // for the message only
	maxActive := p.str(`String(app.info.max_active)`)
	require.Equal(t, "12", maxActive, "the default")
	// Six fenceable strategies, fenced and not: twelve runs.
	p.form([]string{"sqlite", "pg-lease", "pg-unique", "optimistic", "etcd", "zookeeper"}, "both", "2", "1s", "2s", "100ms", "300s")
	p.do("start twelve runs", p.click(`#start`))
	p.until("see twelve runs going", `document.querySelectorAll('.run[data-state="running"]').length === 12`, 150*time.Second)
	require.Equal(t, 12, p.count(`.run`), "of %d strategies, the twelve runs picked", offered)

	// With every run drawn live, the page's own requests answer.
	p.until("fetch /api/info beside twelve live runs", `(window.__info === undefined && (window.__info = fetch('/api/info').then((r) => r.ok ? 'ok' : 'status ' + r.status))), window.__infoDone || (window.__info.then((v) => { window.__infoDone = v; }), false)`, 10*time.Second)
	require.Equal(t, "ok", p.str(`window.__infoDone`))
	// Every run's events reach the page on its one stream (a panel off
	// screen is drawn when it scrolls into view).
	p.until("every run's events arrive", `Array.from(document.querySelectorAll('.run')).every((r) => { const rs = app.runs.get(r.dataset.run); return rs && rs.events.some((e) => e.kind === 'enter'); })`, 90*time.Second)

	// Pause the holder of the last run, a second.
	last := `.run[data-strategy="zookeeper"][data-fenced="true"]`
	p.do("scroll to the last run and pause its holder", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+last+`').scrollIntoView()`),
		chromedp.SetValue(chromedp.CSS(last+` .chaos-for`), "1s"), p.click(last+` button[data-chaos="pause"]`))
	p.until("see the pause injected", fmt.Sprintf(`document.querySelector('%s .msg').textContent.startsWith('injected pause:holder@0s+1s')`, last), 45*time.Second)
	p.until("see the pause drawn", fmt.Sprintf(`document.querySelector('%s rect.band.pause')`, last), 15*time.Second)
	p.shootView(last, "dashboard-max-runs.png")

	// Stop the group: every run ends (five minutes of ticks: only a Stop
	// ends them within the test), its report covers what ran.
	p.do("stop the group", p.click(`#stop`))
	p.until("see every run end", `document.querySelectorAll('.run[data-state="done"] .verdict[data-checker]:not([data-checker="pending"])').length === 12`, 120*time.Second)
	p.until("see the group stopped", `document.querySelector('#grouphead').dataset.state === 'stopped'`, 15*time.Second)
	for _, id := range strings.Split(p.str(`Array.from(document.querySelectorAll('.run')).map((r) => r.dataset.run).join(',')`), ",") {
		rep := h.runReport(t, id)
		fired := 0
		for _, e := range rep.Events {
			if e.Kind == lab.EventTick {
				fired = max(fired, e.Tick)
			}
		}
		require.Less(t, fired, 300, "run %s was stopped before its 300th tick fired", id)
		require.True(t, rep.StoreAgrees, "run %s: the checker agrees with the store", id)
	}
	require.Empty(t, p.exceptions(), "the page threw no JavaScript exception")
}

// A fenced lease run with the holder paused past its TTL: every mark is
// labelled with its token, the holder's lease expires on its lane, the
// successor's grant is drawn there, and the late write's refusal reads
// "t10 < t11" with the token the store held.
func TestEndToEndFencedPauseArgument(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	p := openPage(t, h, 180*time.Second)
	p.form([]string{"pg-lease"}, "on", "3", "400ms", "500ms", "200ms", "7.2s") // long enough for a holder on a loaded machine
	pg := `.run[data-strategy="pg-lease"][data-fenced="true"]`
	p.do("start pg-lease fenced", p.click(`#start`),
		chromedp.WaitReady(chromedp.CSS(pg+`[data-state="running"] button[data-chaos="pause"]:not([disabled])`)),
		chromedp.SetValue(chromedp.CSS(pg+` .chaos-for`), "1.5"),
		p.click(pg+` button[data-chaos="pause"]`))
	p.until("see the pause land", `document.querySelector('`+pg+` rect.band.pause')`, 30*time.Second)
	p.until("see the run end", `document.querySelector('`+pg+`[data-state="done"] .verdict[data-checker="ok"]')`, 60*time.Second)
	rep := h.runReport(t, p.str(`document.querySelector('`+pg+`').dataset.run`))
	require.True(t, rep.StoreAgrees)
	require.Zero(t, rep.DuplicatesApplied)

	// Every mark with a token is labelled with it (or with its refusal),
	// after its tick where the mark is too narrow to hold it.
	tokens := p.texts(pg + ` text.token`)
	require.NotEmpty(t, tokens)
	for _, s := range tokens {
		require.Regexp(t, `^(#[0-9]+ )?[tr][0-9]+$`, s)
	}
	// The paused node and the attempt it was inside.
	paused, from, to := 0, 0.0, 0.0
	for _, e := range rep.Events {
		if paused == 0 && e.Kind == lab.EventChaos && strings.HasPrefix(e.Detail, "pause:") {
			paused, from = e.Node, e.T
		}
		if paused != 0 && to == 0 && e.Kind == lab.EventHealed && e.Node == paused {
			to = e.T
		}
	}
	require.NotZero(t, paused, "the pause event names its node")
	var inside lab.Event // the paused node's grant at the pause
	for _, e := range rep.Events {
		if e.Kind == lab.EventAcquired && e.Node == paused && e.T <= from {
			inside = e
		}
	}
	require.NotZero(t, inside.Token, "the paused holder held a lease:\n%s", dump(rep.Events))
	require.Positive(t, inside.Until, "its grant says when it expires")
	// Paused 1.5 s with a 500 ms TTL, it cannot renew: its lease expires on
	// the server before it resumes, and the page draws that on its lane.
	require.Less(t, inside.Until, to)
	require.Positive(t, p.count(fmt.Sprintf(`%s g.expiry[data-node="%d"][data-token="%d"]`, pg, paused, inside.Token)), "the expiry of node%d's lease t%d is drawn; %s", paused, inside.Token, p.describe())
	// A greater token granted to another node while it was paused is its
	// successor's grant, a ▲ in its own lane; a successor's commit forces the
	// fence to refuse the late write.
	successor, committed := false, false
	for _, e := range rep.Events {
		if e.T > from && e.T < to && e.Node != paused && e.Job == inside.Job && e.Token > inside.Token {
			successor = successor || e.Kind == lab.EventAcquired
			committed = committed || e.Kind == lab.EventExecuted
		}
	}
	if successor {
		require.Positive(t, p.count(fmt.Sprintf(`%s g.successor[data-prev="%d"]:not([data-node="%d"])`, pg, inside.Token, paused)), "the successor of node%d's t%d is drawn in its own lane", paused, inside.Token)
	}
	if committed {
		var stale lab.Event
		for _, e := range rep.Events {
			if e.Kind == lab.EventStale && e.Node == paused && e.Token == inside.Token {
				stale = e
			}
		}
		require.Equal(t, lab.EventStale, stale.Kind, "a successor committed a greater token while node%d was paused: its write is refused\n%s", paused, dump(rep.Events))
		require.Greater(t, stale.Held, stale.Token, "the refusal names the greater token the store held")
		want := fmt.Sprintf("t%d < t%d", stale.Token, stale.Held)
		require.Contains(t, p.texts(fmt.Sprintf(`%s text.refusal[data-node="%d"]`, pg, paused)), want, "the refusal label; %s", p.describe())
		require.Positive(t, p.count(pg+` rect.mark.stale`), "an amber mark")
	}
	require.Regexp(t, regexp.MustCompile(`(?i)what to watch`), p.str(`document.querySelector('`+pg+` .watch').textContent`), "a custom run says what to watch")
	p.shoot(pg, "dashboard-pg-lease-fenced.png")
	require.Empty(t, p.exceptions(), "the page threw no JavaScript exception")
}

// The catalog edited live from the page: a schedule paused, another's
// cadence changed, a new one added; each edit is drawn on its job's lanes,
// the table follows, and the report counts the new job, agreeing with the
// store.
func TestEndToEndCatalogEdit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	p := openPage(t, h, 240*time.Second)
	// Long enough for a loaded machine; stopped once the added job ran.
	p.form([]string{"pg-lease"}, "on", "2", "400ms", "800ms", "100ms", "40s")
	run := `.run[data-strategy="pg-lease"]`
	p.do("start pg-lease", p.click(`#start`))
	p.until("see the run going with its catalog", `document.querySelector('`+run+`[data-state="running"] .catalogtable tbody tr[data-job="invoice-export"] button[data-pause]:not([disabled])')`, 60*time.Second)
	row := func(job string) string { return run + ` .catalogtable tbody tr[data-job="` + job + `"]` }
	require.Zero(t, p.count(run+` details.catalog[open]`), "the Catalog starts folded, the lanes under the Pause button")
	p.do("open the Catalog", p.click(run+` details.catalog summary`))
	p.do("pause seat-assignment", p.click(row("seat-assignment")+` button[data-pause]`))
	p.until("see it paused in the table", `document.querySelector('`+row("seat-assignment")+` td.paused')`, 30*time.Second)
	p.until("see the edit on its lanes", `document.querySelector('`+run+` g.edit[data-job="seat-assignment"]')`, 10*time.Second)
	p.do("invoice-export every 800ms", chromedp.SetValue(chromedp.CSS(row("invoice-export")+` input.every`), "800ms"),
		p.click(row("invoice-export")+` button[data-every]`))
	p.until("see its new cadence", `document.querySelector('`+row("invoice-export")+` td:nth-child(2)').textContent === '800ms'`, 30*time.Second)
	p.do("add a schedule", chromedp.SetValue(chromedp.CSS(run+` .add-name`), "audit"), chromedp.SetValue(chromedp.CSS(run+` .add-every`), "400ms"),
		chromedp.SetValue(chromedp.CSS(run+` .add-work`), "50ms"), p.click(run+` button[data-add]`))
	p.until("see the new schedule in the table", `document.querySelector('`+row("audit")+`')`, 30*time.Second)
	p.until("see the new schedule's lanes", `document.querySelector('`+run+` text.jobhead[data-job="audit"]')`, 30*time.Second)
	// Its first commit, or the run's end on a machine too loaded to run
	// it (then the report still counts its ticks, below).
	p.until("see the new schedule's first commit", `document.querySelector('`+run+` rect.mark.exec[data-job="audit"]') || document.querySelector('`+run+`[data-state="done"]')`, 60*time.Second)
	p.do("stop the run", chromedp.Evaluate[chromedp.Void](`(() => { const b = document.querySelector('`+run+` button[data-stop]'); if (!b.disabled) b.click(); })()`))
	p.until("see the run end", `document.querySelector('`+run+`[data-state="done"] .verdict[data-checker="ok"]')`, 60*time.Second)
	p.shoot(run, "dashboard-catalog-edit.png")

	rep := h.runReport(t, p.str(`document.querySelector('`+run+`').dataset.run`))
	require.True(t, rep.StoreAgrees, "the checker agrees with the store")
	jobs := map[string]lab.JobReport{}
	for _, j := range rep.Jobs {
		jobs[j.Name] = j
	}
	require.Contains(t, jobs, "audit", "the report counts the job added live")
	require.Positive(t, jobs["audit"].Ticks, "the added job's ticks from its effective time")
	require.Equal(t, lab.CheckOK, jobs["audit"].Checker)
	require.GreaterOrEqual(t, p.count(run+` rect.mark[data-job="audit"]`), jobs["audit"].Executions, "a mark for each of its sections")
	require.Equal(t, 3, p.count(run+` g.edit`), "three edits drawn")
	require.Empty(t, p.exceptions(), "the page threw no JavaScript exception")
}

// Redis failover from its button, then Redis restart: the failover lands
// on the holder's grant (drawn on its lane), and the restart restarts the
// server the nodes use now, the promoted replica. The session starts its
// own Redis (the failover kills its primary).
func TestEndToEndRedisFailoverThenRestart(t *testing.T) {
	t.Parallel()
	h := newHarnessOn(t, runner.Servers{PostgresURL: testenv.PostgresURL(t)}, nil)
	p := openPage(t, h, 200*time.Second)
	p.form([]string{"redis"}, "on", "3", "500ms", "1500ms", "200ms", "9s")
	run := `.run[data-strategy="redis"]`
	p.do("start redis fenced", p.click(`#start`),
		chromedp.WaitReady(chromedp.CSS(run+`[data-state="running"] button[data-chaos="failover"]:not([disabled])`)),
		p.click(run+` button[data-chaos="failover"]`))
	p.until("see the failover injected", `document.querySelector('`+run+` .msg').textContent.startsWith('injected failover:redis')`, 30*time.Second)
	p.until("see the holder's lost grant on its lane", `document.querySelector('`+run+` g.failovermark')`, 30*time.Second)
	p.do("restart Redis", p.click(run+` button[data-chaos="restart"]`))
	p.until("see the restart injected", `document.querySelector('`+run+` .msg').textContent.startsWith('injected restart:redis')`, 30*time.Second)
	p.until("see the run end", `document.querySelector('`+run+`[data-state="done"] .verdict:not([data-checker="pending"])')`, 60*time.Second)
	p.shoot(run, "dashboard-redis-failover.png")

	rep := h.runReport(t, p.str(`document.querySelector('`+run+`').dataset.run`))
	require.True(t, rep.StoreAgrees)
	var promoted, restarted string
	for _, e := range rep.Events {
		if e.Kind != lab.EventChaos {
			continue
		}
		if m := regexp.MustCompile(`replica ([0-9.:]+),? (?:which never received that grant, )?promoted`).FindStringSubmatch(e.Detail); m != nil {
			promoted = m[1]
			require.NotZero(t, e.Node, "the failover names the holder whose grant it lost: %s", e.Detail)
		}
		if strings.HasPrefix(e.Detail, "restart:redis") {
			restarted = e.Detail
		}
	}
	require.NotEmpty(t, promoted, "a replica was promoted:\n%s", dump(rep.Events))
	require.Contains(t, restarted, promoted, "the restart restarted the promoted replica the nodes use")
	require.Empty(t, p.exceptions(), "the page threw no JavaScript exception")
}
