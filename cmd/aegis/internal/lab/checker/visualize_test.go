package checker_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
	"github.com/aegislab/aegis/internal/testing/chromium"
)

// The checker's visualisation of a violation names its lanes for the
// nodes, as headless Chromium draws it: node1, node2 and, for a node's op
// that overlaps its own earlier one (a killed incarnation's beside its
// successor's), node2 #2.
func TestViolationPageNamesLanes(t *testing.T) {
	t.Parallel()
	// Tick 1 applied twice; node 2's read of tick 3 overlaps its write of
	// tick 2, which never said whether it landed (an earlier incarnation's,
	// killed in it): a lane of its own.
	h := &histBuilder{job: "export", fenced: true}
	h.read(1, 1, 1, 0, opOK, 0, 10).write(1, 1, 1, 1, opOK, 20, 30).
		read(2, 1, 2, 1, opOK, 40, 50).write(2, 1, 2, 2, opOK, 60, 70).
		read(2, 2, 3, 2, opOK, 75, 78).write(2, 2, 3, 3, opUnknown, 80, 200).
		read(2, 3, 4, 3, opOK, 100, 110)
	h.ops[6].Attempt = "2.2.3"
	dir := t.TempDir()
	v, err := checker.CheckJobs(h.ops, checker.FenceOwner, 10*time.Second, dir)
	require.NoError(t, err)
	require.Equal(t, checker.CheckViolation, v[0].Verdict)
	require.FileExists(t, v[0].HTML)

	bctx, _ := chromium.Start(t, 2*time.Minute)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate("file://"+v[0].HTML), chromedp.WaitVisible(chromedp.CSS(`#canvas svg`))))
	const lanes = `[...document.querySelectorAll('#canvas svg > g:first-of-type > text')]`
	labels, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](lanes+`.map(t => t.textContent)`))
	require.NoError(t, err)
	legend, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#legend text').textContent`))
	require.NoError(t, err)
	// The leftmost label starts inside the page.
	left, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`Math.min(...`+lanes+`.map(t => t.getBoundingClientRect().left))`))
	require.NoError(t, err)
	require.Equal(t, []string{"node1", "node2", "node2 #2"}, labels, "the lanes are named for the nodes")
	require.Equal(t, "Nodes", legend)
	require.GreaterOrEqual(t, left, 0.0, "the names fit on the page")
}
