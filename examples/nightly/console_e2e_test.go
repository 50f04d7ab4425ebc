package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

var screenshots = flag.Bool("screenshots", false, "write the console's screenshots over the demo into docs/ (docs/console-nightly-*.png)")

// Issue 17's "done when": `aegis console` on the database of the demo,
// after its story ran, shows the paused replica's run reclaimed by another
// node with a greater token, and the paused replica's stale write refused
// by the fence, with both tokens and, as the fence recorded it, its writer.
func TestConsoleShowsTheReclaimedRunAndTheRefusedWrite(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 1, "the demo's three replicas, then a browser")
	// The demo recreates the schema testenv made for the test (dropped
	// at its end) and names it in the URL as a runtime parameter,
	// search_path=…, as it does for its own schema.
	u, err := url.Parse(testenv.PostgresURL(t))
	require.NoError(t, err)
	q := u.Query()
	schema, ok := strings.CutPrefix(q.Get("options"), "-csearch_path=")
	require.True(t, ok, "testenv's URL names its schema in options: %s", q.Get("options"))
	q.Del("options")
	u.RawQuery = q.Encode()
	base := u.String()

	var out bytes.Buffer
	res, err := demo(t.Context(), []string{"-postgres", base, "-schema", schema}, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.True(t, res.Stale, "the resumed replica's write was refused")
	require.NotEmpty(t, res.Runner)
	require.NotEmpty(t, res.Reclaimer)
	require.NotEqual(t, res.Runner, res.Reclaimer, "another replica's reaper reclaimed the run")
	require.Greater(t, res.ReclaimToken, res.RunnerToken)
	require.Contains(t, res.Console, "search_path="+schema)
	require.Contains(t, out.String(), res.Console, "the demo prints the command")

	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	at := startConsole(t, u.String())

	page := chromium.Open(t, 60*time.Second)
	ctx, exceptions, text, do := page.Ctx, page.Exceptions, page.Text, page.Do
	shoot := func(name string) {
		t.Helper()
		if *screenshots {
			page.Screenshot("../../docs/" + name)
		}
	}
	cell := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, "%s; the page:\n%s", sel, text())
		return strings.TrimSpace(s)
	}

	do("open the schedules", chromedp.Navigate(at+"schedules"), chromedp.WaitVisible(chromedp.CSS(`table.attempts`)))
	// The attempt history's columns: schedule, fire time, attempt, node,
	// token, claimed, ended, outcome, …
	run := `table.attempts tr[data-job="nightly-reconciliation"][data-attempt="2"] td:nth-child`
	require.Equal(t, res.Reclaimer, cell(run+`(4)`), "the reclaiming replica ran it")
	require.Equal(t, fmt.Sprint(res.ReclaimToken), cell(run+`(5)`), "the run carries the reclaiming token")
	require.Equal(t, "2", cell(run+`(3)`), "the second attempt: the reaper's")
	require.Equal(t, "succeeded after a reclaim", cell(run+`(8)`))
	first := `table.attempts tr[data-job="nightly-reconciliation"][data-attempt="1"] td:nth-child`
	require.Equal(t, res.Runner, cell(first+`(4)`), "the paused replica's attempt is on record too")
	require.Equal(t, fmt.Sprint(res.RunnerToken), cell(first+`(5)`))
	require.Equal(t, "refused", cell(first+`(8)`), "it ran to its end after the reclaim: its outcome was refused")
	require.Contains(t, text(), "None: no run is running past its lease", "the reaper left no stuck run")
	shoot("console-nightly-runs.png")

	do("open the fence", chromedp.Click(chromedp.CSS(`nav a[href="/fence"]`)), chromedp.WaitVisible(chromedp.CSS(`#fence`)))
	// Its columns: resource, last accepted token, refusals, last refused,
	// the fence held, when.
	refused := `#fence tr[data-resource="reconciliation"] td:nth-child`
	require.Equal(t, "1", cell(refused+`(3)`), "one stale write refused")
	require.Equal(t, fmt.Sprint(res.RunnerToken), cell(refused+`(4)`), "the paused replica's token")
	require.Equal(t, fmt.Sprint(res.ReclaimToken), cell(refused+`(5)`), "the reclaiming token the fence held")
	// The refusal as the fence recorded it, with no call of the replica's:
	// its writer and its run.
	rec := fmt.Sprintf(`#refusals tr[data-resource="reconciliation"][data-token="%d"][data-held="%d"]`, res.RunnerToken, res.ReclaimToken)
	require.Equal(t, res.Runner, cell(rec+` td.writer`), "the paused replica wrote it")
	require.Equal(t, "nightly-reconciliation #1", cell(rec+` a.attempt`), "its run's first attempt")
	shoot("console-nightly-fence.png")
	require.Empty(t, exceptions())
}

// startConsole builds the aegis command and runs `aegis console --store
// storeURL` on a free loopback port until the test ends (SIGTERM, then it
// must exit 0 within 20s), and returns the address it prints.
func startConsole(t *testing.T, storeURL string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "aegis")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/aegislab/aegis/cmd/aegis").CombinedOutput()
	require.NoError(t, err, "go build ./cmd/aegis:\n%s", out)
	cmd := exec.Command(bin, "console", "--addr", "127.0.0.1:0", "--store", storeURL)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`^aegis console: at (http://\S+/)$`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait() // after the output is read, as Wait asks
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := testenv.Recv(t, exited, 20*time.Second, "aegis console to stop")
		require.NoError(t, err, "aegis console's exit; stderr:\n%s", stderr.String())
	})
	select {
	case a := <-addr:
		return a
	case err := <-exited:
		exited <- err // for the cleanup
		t.Fatalf("aegis console exited (%v) before serving; stderr:\n%s", err, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("aegis console printed no address within 20s; stderr:\n%s", stderr.String())
	}
	return ""
}
