// Package chromium starts Debian's headless Chromium for a test, driven by
// chromedp: the dashboard's and the console's end-to-end tests. It imports
// package testing: only tests import it.
package chromium

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Path returns Debian's Chromium (or $AEGIS_CHROMIUM). A missing
// browser fails the test: CI installs it (scripts/services install).
func Path(t testing.TB) string {
	t.Helper()
	path := os.Getenv("AEGIS_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		if p, lerr := exec.LookPath("chromium"); lerr == nil && os.Getenv("AEGIS_CHROMIUM") == "" {
			return p
		}
		t.Fatalf("the end-to-end tests need Chromium, and %s is missing (%v): install the Debian package with "+
			"`scripts/services install` (as root) or `apt-get install chromium`, or point AEGIS_CHROMIUM at a Chromium binary", path, err)
	}
	return path
}

// Start starts headless Chromium for the test, for at most budget (then
// every wait fails), and returns its context and the JavaScript exceptions
// its pages have thrown so far. The browser and its profile go at the
// test's end.
func Start(t *testing.T, budget time.Duration) (context.Context, func() []string) {
	t.Helper()
	exe := Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	dir, err := os.MkdirTemp("", "aegis-chromium-")
	require.NoError(t, err)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1400, 1000),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	require.NoError(t, chromedp.Do(bctx), "start Chromium (%s)", exe)

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
		_ = chromedp.Cancel(bctx) // closes the browser and waits for it
		bcancel()
		acancel()
		cancel()
		wg.Wait()
		// Chromium's helpers may still write in its directory for a moment
		// after it exits.
		deadline := time.Now().Add(5 * time.Second)
		for os.RemoveAll(dir) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	})
	return bctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), exceptions...)
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
