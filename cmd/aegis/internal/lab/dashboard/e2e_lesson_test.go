package dashboard_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

var lessonRuns = flag.Int("lesson-runs", 1, "TestEndToEndLesson's rounds: each runs every fenced lease strategy once (make lab-lesson: 5)")

// lessonStrategies are the fenced lease strategies whose lesson is the
// paused holder's late write refused by the fence.
var lessonStrategies = []string{"sqlite", "pg-lease", "redis", "redlock", "etcd", "zookeeper"}

// The course's lesson, as a student gets it at 1366×768: every fenced
// lease strategy ticked, the form's defaults (tick 1s, TTL 2s, work
// 300ms), Start, then Pause (the holder, 3s) on each run. Every run shows
// the refused late write: the page's stale count and an amber mark with
// its refusal label, whichever job's tick the pause landed in (a pause
// lasts until a successor has read with a greater token). The lanes of
// the run are on screen when Pause is pressed, the Catalog folded.
// -lesson-runs N repeats it (make lab-lesson: 5 of 5 per strategy).
func TestEndToEndLesson(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, testenv.Slots(), "a browser and six runs at once: the whole machine")
	require.Positive(t, *lessonRuns)
	h := newHarness(t, nil)
	p := openPage(t, h, time.Duration(*lessonRuns)*150*time.Second)
	p.do("a laptop's window", chromedp.EmulateViewport(1366, 768))
	refused := map[string][]int{}
	for round := 1; round <= *lessonRuns; round++ {
		p.do("pick the fenced lease strategies, fence on, the defaults", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
			`for (const b of document.querySelectorAll('#strategies input')) b.checked = %s.includes(b.value); document.querySelector('input[name="fence"][value="on"]').checked = true`,
			jsList(lessonStrategies))))
		before := p.str(`String(app.current || '')`)
		p.do("press Start", p.click(`#start`))
		p.until("see the new group", fmt.Sprintf(`app.current && app.current !== %q && document.querySelectorAll('.run').length === %d`, before, len(lessonStrategies)), 30*time.Second)
		require.Zero(t, p.count(`.run details.catalog[open]`), "the Catalog is folded")
		ids := map[string]string{}
		for _, s := range lessonStrategies {
			run := fmt.Sprintf(`.run[data-strategy=%q][data-fenced="true"]`, s)
			p.until(s+" runs", `document.querySelector('`+run+`[data-state="running"] button[data-chaos="pause"]:not([disabled])')`, 90*time.Second)
			ids[s] = p.str(`document.querySelector('` + run + `').dataset.run`)
			require.Equal(t, "holder", p.str(`document.querySelector('`+run+` .chaos-target').value`), "Pause's default target")
			require.Equal(t, "3s", p.str(`document.querySelector('`+run+` .chaos-for').value`), "Pause's default time")
			p.do("press Pause on "+s, p.click(run+` button[data-chaos="pause"]`))
			// The lanes in the window as the student pressed it.
			p.until("see "+s+"'s lanes on screen", `(() => { const r = document.querySelector('`+run+` .lanes').getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight - 120 && r.bottom > 0; })()`, 2*time.Second)
		}
		for _, s := range lessonStrategies {
			run := fmt.Sprintf(`.run[data-run=%q]`, ids[s])
			p.until("see "+s+"'s pause injected", `/^injected pause:holder/.test(document.querySelector('`+run+` .msg').textContent)`, 45*time.Second)
			if round == 1 && s == "pg-lease" {
				// A panel off screen is drawn when it scrolls into view.
				p.do("scroll to pg-lease", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+run+`').scrollIntoView({ block: 'start' })`))
				p.until("see the pause drawn", `document.querySelector('`+run+` rect.band.pause')`, 15*time.Second)
				p.shootLaptop(run, run, "dashboard-lesson-paused.png")
			}
		}
		if round == 1 {
			// The course's next step: its nightly job, 1.5 s of work, from
			// the Catalog form. The run's jobs work at most 450 ms: the
			// page says in its own words what to change.
			run := fmt.Sprintf(`.run[data-run=%q]`, ids["pg-lease"])
			p.do("add the nightly job", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+run+` details.catalog').open = true`),
				chromedp.SetValue(chromedp.CSS(run+` .add-name`), "nightly"), chromedp.SetValue(chromedp.CSS(run+` .add-every`), "2s"),
				chromedp.SetValue(chromedp.CSS(run+` .add-work`), "1.5s"), p.click(run+` button[data-add]`))
			p.until("see why nightly is not added", `document.querySelector('`+run+` .msg.error')`, 30*time.Second)
			msg := p.str(`document.querySelector('` + run + ` .msg').textContent`)
			require.Contains(t, msg, "Add schedule nightly: nightly works 1.5s, longer than this run's longest job (450ms)")
			require.Contains(t, msg, "in the Run form: work 1s or more")
			pageWords(t, msg, "edit:nightly@0s=2s/1.5s")
			require.NotContains(t, msg, "edit:", "no spec")
			// A fenced run that refused nothing says why, from its events:
			// the cases, as the page reads them.
			why := func(events string) string { return p.str(`whyNoRefusal(` + events + `)`) }
			held := `{t: 0.03, kind: 'acquired', node: 2, job: 'invoice-export', tick: 1, token: '1', until: 2.03}, ` +
				`{t: 0.05, kind: 'entered', node: 2, job: 'invoice-export', tick: 1, token: '1', attempt: '2.1.1'}, ` +
				`{t: 0.06, kind: 'chaos', node: 2, job: 'invoice-export', tick: 1, token: '1', detail: 'pause:holder@0s+3s: node2 paused'}, `
			woke := `{t: 3.03, kind: 'healed', node: 2, detail: 'node2 resumed'}, {t: 3.06, kind: 'executed', node: 2, job: 'invoice-export', tick: 1, token: '1', attempt: '2.1.1'}`
			require.Equal(t, "no node was paused or cut off in this run, so no holder wrote late: the fence had nothing to refuse.", why(`[]`))
			require.Equal(t, "no successor was granted invoice-export's lease before node2 woke at 3.03 s: its late write of tick 1 t1 met no greater token.", why(`[`+held+woke+`]`))
			require.Equal(t, "node3 was granted invoice-export's lease (t2) at 2.50 s, but had not read its ledger with it before node2 woke at 3.03 s: the fence holds a token from its holder's read on, so node2's late write of tick 1 t1 met no greater token.",
				why(`[`+held+`{t: 2.5, kind: 'acquired', node: 3, job: 'invoice-export', tick: 3, token: '2'}, `+woke+`]`))
			require.Equal(t, "node1 was paused at 1.00 s outside a critical section (it had read no job's ledger): it had no write to make late.",
				why(`[{t: 1, kind: 'chaos', node: 1, detail: 'pause:node1@1s+3s: node1 paused'}, {t: 4, kind: 'healed', node: 1}]`))
			p.do("fold the Catalog again", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+run+` details.catalog').open = false`))
		}
		for _, s := range lessonStrategies {
			run := fmt.Sprintf(`.run[data-run=%q]`, ids[s])
			p.until("see "+s+" end", `document.querySelector('`+run+`[data-state="done"] .verdict:not([data-checker="pending"])')`, 90*time.Second)
			why := p.str(`(document.querySelector('` + run + ` .why') || {}).textContent || ''`)
			stale, err := strconv.Atoi(p.str(`document.querySelector('` + run + ` [data-count="stale_rejected"] dd').textContent`))
			require.NoError(t, err)
			require.Positive(t, stale, "round %d: %s fenced shows no refused late write; the page says %q\n%s", round, s, why, dump(h.runReport(t, ids[s]).Events))
			require.Empty(t, why, "a run with a refusal has no words for none")
			require.Positive(t, p.count(run+` rect.mark.stale`), "%s: an amber mark", s)
			require.Positive(t, p.count(run+` text.refusal`), "%s: its refusal's label", s)
			rep := h.runReport(t, ids[s])
			require.Equal(t, rep.StaleRejected, stale, "%s: the page's count is the report's", s)
			require.True(t, rep.StoreAgrees, "%s: the store agrees", s)
			// What the strategy's label promises, fenced (no clock skew
			// here): no lost update; each tick once, except where the label
			// says no (Redlock: two holders at once are possible, and the
			// second one's write after the first's is no stale write).
			st, ok := lab.LookupStrategy(s)
			require.True(t, ok, s)
			g := st.Guarantee(true)
			require.True(t, g.Ledger, "%s fenced keeps the ledger", s)
			require.Zero(t, rep.LostUpdates, "%s fenced: no update lost; its jobs %+v\n%s", s, rep.Jobs, dump(rep.Events))
			if g.Once != lab.OnceNo {
				require.Zero(t, rep.DuplicatesApplied, "%s fenced: no tick applied twice; its jobs %+v\n%s", s, rep.Jobs, dump(rep.Events))
			}
			healed := ""
			for _, e := range rep.Events {
				if e.Kind == lab.EventHealed && strings.Contains(e.Detail, "resumed with SIGCONT after") {
					healed = e.Detail
				}
			}
			require.Regexp(t, `after [0-9.]+s: the 3s asked`, healed, "%s: the pause's end says how long it lasted and why", s)
			refused[s] = append(refused[s], stale)
			if round == 1 && s == "pg-lease" {
				p.shootLaptop(run+` rect.mark.stale`, run, "dashboard-lesson-refused.png")
			}
		}
	}
	for _, s := range lessonStrategies {
		t.Logf("%s fenced: %d of %d runs showed a refused late write (stale rejected per run: %v)", s, len(refused[s]), *lessonRuns, refused[s])
	}
	require.Empty(t, p.exceptions(), "the page threw no JavaScript exception")
}

// shootLaptop writes a screenshot of the window (1366×768) into docs/
// with -screenshots: scrolled to the run as a student's Start scrolls it
// (its panel at the top), or, for a mark, to the lanes that have it.
func (p *page) shootLaptop(sel, run, name string) {
	p.t.Helper()
	if !*screenshots {
		return
	}
	block := "start"
	if sel != run {
		block = "center"
	}
	p.do("scroll and wait for a frame", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).scrollIntoView({ block: %q }); new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))`, sel, block), chromedp.EvalAwaitPromise))
	png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
	require.NoError(p.t, err)
	path := filepath.Join("..", "..", "..", "..", "..", "docs", name)
	require.NoError(p.t, os.WriteFile(path, png, 0o644))
	p.t.Logf("wrote %s", path)
}
