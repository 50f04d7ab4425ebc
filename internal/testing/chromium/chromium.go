// Package chromium starts Debian's headless Chromium for a test, driven by
// chromedp: the dashboard's and the console's end-to-end tests. It imports
// package testing: only tests import it.
package chromium

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

// Path returns the Chromium binary to start: $AEGIS_CHROMIUM, or Debian's
// (the program behind its /usr/bin/chromium wrapper script, so that
// neither the wrapper's flags nor its /dev/shm check apply: Start passes
// the flags a container needs itself), or chromium on $PATH. A missing
// browser fails the test: CI installs it (scripts/services install).
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AEGIS_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("AEGIS_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, p := range []string{"/usr/lib/chromium/chromium", "/usr/bin/chromium"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatalf("the end-to-end tests need Chromium, and there is none (/usr/lib/chromium/chromium, /usr/bin/chromium, $PATH): " +
		"install Debian's package with `scripts/services install` (as root) or `apt-get install chromium`, or point AEGIS_CHROMIUM at a Chromium binary")
	return ""
}

// Flags are the flags Start gives Chromium: headless, as root in a
// container (no sandbox, no GPU, shared memory in /tmp rather than a small
// /dev/shm), on a machine with no network (nothing in the background
// reaches out), and no crash reporter.
var Flags = []chromedp.ExecAllocatorOption{
	chromedp.Headless,
	chromedp.NoSandbox, // as root
	chromedp.DisableGPU,
	chromedp.NoFirstRun,
	chromedp.NoDefaultBrowserCheck,
	chromedp.Flag("disable-dev-shm-usage", true),
	chromedp.Flag("disable-quic", true),
	chromedp.Flag("disable-background-networking", true),
	chromedp.Flag("disable-component-update", true),
	chromedp.Flag("disable-sync", true),
	chromedp.Flag("disable-extensions", true),
	chromedp.Flag("disable-breakpad", true),
	chromedp.Flag("disable-crash-reporter", true),
	chromedp.Flag("mute-audio", true),
	chromedp.Flag("password-store", "basic"),
	chromedp.WindowSize(1400, 1000),
}

// startTries and startTimeout bound Chromium's start: a try that has not
// answered within startTimeout (its first start on a machine builds its
// font cache) is killed and another made, at most startTries in all.
const (
	startTries   = 3
	startTimeout = 45 * time.Second
)

// Start starts headless Chromium for the test, for at most budget (then
// every wait fails), and returns its context and the JavaScript exceptions
// its pages have thrown so far. It holds one of the machine's test slots
// (testenv.Reserve) while the browser runs. A start that fails or hangs is
// made again, bounded; the last failure fails the test with what the
// browser printed. The browser and its profile go at the test's end.
func Start(t *testing.T, budget time.Duration) (context.Context, func() []string) {
	t.Helper()
	exe := Path(t)
	testenv.Reserve(t, 1, "a browser")
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	t.Cleanup(cancel)
	var (
		bctx         context.Context
		closeBrowser func()
		output       testenv.Buffer
		dir          string
	)
	for try := 1; ; try++ {
		var err error
		dir, err = os.MkdirTemp("", "aegis-chromium-")
		require.NoError(t, err)
		output.Reset()
		opts := append([]chromedp.ExecAllocatorOption{chromedp.ExecPath(exe), chromedp.UserDataDir(dir), chromedp.CombinedOutput(&output)}, Flags...)
		actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
		var bcancel context.CancelFunc
		bctx, bcancel = chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
		// The first run starts the browser, and a timeout on its context
		// would stop the browser with it: the bound is a timer.
		started := make(chan error, 1)
		go func() { started <- chromedp.Do(bctx) }()
		timer := time.NewTimer(startTimeout)
		select {
		case err = <-started:
		case <-timer.C:
			acancel() // kills the browser; the start returns
			<-started
			err = fmt.Errorf("no answer within %s", startTimeout)
		}
		timer.Stop()
		if err == nil {
			closeBrowser = func() {
				_ = chromedp.Cancel(bctx) // closes the browser and waits for it
				bcancel()
				acancel()
			}
			break
		}
		_ = chromedp.Cancel(bctx)
		bcancel()
		acancel()
		removeProfile(dir)
		if try == startTries || ctx.Err() != nil {
			t.Fatalf("start Chromium (%s): %d tries of at most %s failed; the last: %v; it printed:\n%s", exe, try, startTimeout, err, output.String())
		}
		t.Logf("start Chromium (%s), try %d of %d: %v; trying again", exe, try, startTries, err)
	}

	var mu sync.Mutex
	var exceptions []string
	var wg sync.WaitGroup
	events := chromedp.Events(bctx, runtime.ExceptionThrown)
	wg.Go(func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			mu.Lock()
			exceptions = append(exceptions, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		closeBrowser()
		wg.Wait() // the exceptions' reader ends with the browser
		removeProfile(dir)
	})
	return bctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), exceptions...)
	}
}

// removeProfile removes a browser's profile directory: its helpers may
// still write in it for a moment after it exits.
func removeProfile(dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for os.RemoveAll(dir) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// Page is a test's browser with the helpers every end-to-end test of a
// page uses.
type Page struct {
	t   *testing.T
	Ctx context.Context
	// Exceptions are the JavaScript exceptions the pages threw so far.
	Exceptions func() []string
}

// Open starts Chromium as Start does.
func Open(t *testing.T, budget time.Duration) *Page {
	t.Helper()
	ctx, exceptions := Start(t, budget)
	return &Page{t: t, Ctx: ctx, Exceptions: exceptions}
}

// Text is the page's text ("" when it cannot be read), for a failure's
// message.
func (p *Page) Text() string {
	s, _ := chromedp.Run(p.Ctx, chromedp.Evaluate[string](`document.body.innerText`))
	return s
}

// Do runs steps, and fails the test with what and the page's text when one
// fails (or the budget ran out).
func (p *Page) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	require.NoError(p.t, chromedp.Do(p.Ctx, steps...), "%s; the page:\n%s", what, p.Text())
}

// Screenshot writes the whole page as a PNG to path.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	png, err := chromedp.Run(p.Ctx, chromedp.FullScreenshot(100))
	require.NoError(p.t, err)
	require.NoError(p.t, os.WriteFile(path, png, 0o644))
}
