package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/schedule"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const password = "pw-admin-example-test"

// build compiles the example into a temporary directory, as `go build`
// does for its user, and returns the binary.
func build(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "admin")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build ./examples/admin:\n%s", out)
	return bin
}

// start runs the example's binary on a free loopback port until the test
// ends (SIGTERM, then it must exit 0 within 20s), and returns its base URL
// and what it printed so far.
func start(t *testing.T, bin, storeURL string, args ...string) (string, *testenv.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "AEGIS_POSTGRES_URL="+storeURL, "ADMIN_PASSWORD="+password)
	var output testenv.Buffer
	cmd.Stderr = &output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stdout, &output))
		for sc.Scan() {
			if m := regexp.MustCompile(`^admin: at (http://\S+)/ \(the console at /admin/aegis/, user admin\)$`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			require.NoError(t, err, "the example's exit; it printed:\n%s", output.String())
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				t.Errorf("the example did not end within 20s of SIGKILL")
			}
			t.Errorf("the example did not stop within 20s of SIGTERM; it printed:\n%s", output.String())
		}
		require.NotContains(t, output.String(), password, "the password is never printed")
	})
	select {
	case a := <-addr:
		return a, &output
	case err := <-exited:
		exited <- err
		t.Fatalf("the example exited (%v) before serving; it printed:\n%s", err, output.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the example printed no address within 30s; it printed:\n%s", output.String())
	}
	return "", nil
}

func get(t *testing.T, u string, auth bool) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	require.NoError(t, err)
	if auth {
		req.SetBasicAuth("admin", password)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// The example program, built and run as its user runs it, on a real
// PostgreSQL: its own route answers; the console under /admin/aegis/
// refuses a request without the program's credentials; with them, in
// Chromium, the overview leads to the held lease and its token, and a
// schedule is paused through the console's confirmation. With -read-only
// the console offers and takes no change.
func TestAdminExample(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	storeURL := testenv.PostgresURL(t)
	pool, err := pgxpool.New(ctx, storeURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	locker, err := pglease.New(pool, nil)
	require.NoError(t, err)
	held, err := locker.TryAcquire(ctx, "invoice-export/2026-10", 10*time.Minute) // longer than the test: a wait for a browser slot must not let it expire
	require.NoError(t, err)
	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(t, err)
	_, err = cat.Put(ctx, schedule.Entry{Name: "export", Every: time.Minute, Handler: "export"})
	require.NoError(t, err)

	bin := build(t)
	base, _ := start(t, bin, storeURL)
	code, _, body := get(t, base+"/healthz", false)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "ok\n", body, "the program's own route, without credentials")
	for _, p := range []string{"/admin/aegis/", "/admin/aegis/leases", "/admin/aegis/style.css"} {
		code, h, body := get(t, base+p, false)
		require.Equal(t, http.StatusUnauthorized, code, "%s without credentials: %s", p, body)
		require.Contains(t, h.Get("WWW-Authenticate"), "Basic")
		require.NotContains(t, body, "invoice-export", p)
	}
	code, _, body = get(t, base+"/admin/aegis/leases", true)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `href="/admin/aegis/leases/invoice-export%2F2026-10"`)

	page := chromium.Open(t, 90*time.Second)
	bctx, exceptions, text, do := page.Ctx, page.Exceptions, page.Text, page.Do
	// Headless, Chromium answers the middleware's challenge with no
	// credentials: the load fails.
	err = chromedp.Do(bctx, chromedp.Navigate(base+"/admin/aegis/"))
	require.ErrorContains(t, err, "ERR_INVALID_AUTH_CREDENTIALS", "the middleware refused the browser without credentials")
	do("send the program's credentials", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+password))},
		})
		return err
	}))
	do("open the console", chromedp.Navigate(base+"/admin/aegis/"), chromedp.WaitVisible(chromedp.CSS(`#card-leases`)))
	card, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#card-leases`)))
	require.NoError(t, err)
	require.Equal(t, "1 held of 1 lease keys", strings.Join(strings.Fields(card), " "))
	do("follow the card", chromedp.Click(chromedp.CSS(`#card-leases`)), chromedp.WaitVisible(chromedp.CSS(`#leases`)))
	location, err := chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, base+"/admin/aegis/leases", location)
	token, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-key="invoice-export/2026-10"] .token`)))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(held.Token), token)

	do("open the schedules", chromedp.Click(chromedp.CSS(`nav a[href="/admin/aegis/schedules"]`)), chromedp.WaitVisible(chromedp.CSS(`#catalog`)))
	do("ask to pause", chromedp.Click(chromedp.CSS(`tr[data-schedule="export"] a.button[href="/admin/aegis/schedules/export/pause"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	do("confirm", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="export"][data-paused="true"]`)))
	require.Contains(t, text(), "Paused: no replica starts a tick of it from now on")
	e, err := cat.Get(ctx, "export")
	require.NoError(t, err)
	require.True(t, e.Paused, "the page's pause is in the catalog")
	require.Empty(t, exceptions())

	ro, _ := start(t, bin, storeURL, "-read-only")
	code, _, body = get(t, ro+"/admin/aegis/schedules", true)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-schedule="export" data-paused="true"`)
	require.NotContains(t, body, "/resume")
	code, _, _ = get(t, ro+"/admin/aegis/schedules/export/resume", true)
	require.Equal(t, http.StatusForbidden, code, "read-only")
}
