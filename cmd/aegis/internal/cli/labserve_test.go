package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// labServe runs `aegis lab ARGS…` until the test cancels it, and returns
// the printed URL (fragment included), a function that stops the command
// and returns its exit code, and its standard error so far.
func labServe(t *testing.T, args ...string) (string, func() int, func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr testenv.Buffer
	done := make(chan int, 1)
	go func() {
		code := Main(ctx, append([]string{"lab"}, args...), pw, &stderr)
		pw.Close()
		done <- code
	}()
	lines := make(chan string, 16)
	go func() { // drains stdout until the command ends
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var once sync.Once
	code := -1
	stop := func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
				// stdout is closed before done is sent: the reader ends.
				timeout := time.After(10 * time.Second)
				for open := true; open; {
					select {
					case _, open = <-lines:
					case <-timeout:
						t.Errorf("the reader of aegis lab's stdout did not end")
						open = false
					}
				}
			case <-time.After(60 * time.Second):
				t.Errorf("aegis lab did not stop within 60s after Ctrl-C; stderr:\n%s", stderr.String())
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	at := regexp.MustCompile(`the dashboard is at (http://\S+)`)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "aegis lab ended before printing its URL; stderr:\n%s", stderr.String())
			if m := at.FindStringSubmatch(line); m != nil {
				return m[1], stop, stderr.String
			}
		case <-timeout:
			t.Fatalf("aegis lab printed no URL within 30s; stderr:\n%s", stderr.String())
		}
	}
}

func post(t *testing.T, base, path, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// `aegis lab` serves the dashboard on loopback, prints its URL, and on
// Ctrl-C stops its runs (their node processes) and exits 0.
func TestLabServesDashboard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	u, stop, stderr := labServe(t, "--addr", "127.0.0.1:0", "--dir", dir, "--postgres-url", testenv.PostgresURL(t))
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, u, "loopback: no token in the URL")
	code, page := get(t, u)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "<title>Aegis lab</title>")

	code, body := post(t, u, "api/groups", `{"runs":[{"strategy":"none","nodes":2,"tick":"100ms","work":"10ms","duration":"60s"}]}`)
	require.Equal(t, http.StatusCreated, code, body)
	var g struct {
		Runs []struct{ ID string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &g))
	code, body = get(t, u+"api/runs/"+g.Runs[0].ID)
	require.Equal(t, http.StatusOK, code, body)
	var st struct {
		Status struct {
			Nodes []struct{ Pid int }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Status.Nodes, 2)

	require.Equal(t, 0, stop(), "Ctrl-C is a clean exit; stderr:\n%s", stderr())
	for _, n := range st.Status.Nodes {
		require.False(t, testenv.PidAlive(n.Pid), "node pid %d still runs after aegis lab stopped", n.Pid)
	}
	require.Contains(t, stderr(), "stopping the runs and the servers")
	_, err := http.Get(u) //nolint:noctx // the server is gone
	require.Error(t, err, "the dashboard stopped listening")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "a --dir given is kept")
}

// On an address other than loopback, aegis lab generates a token, prints
// it with the URL, and refuses every change without it.
func TestLabNonLoopbackNeedsToken(t *testing.T) {
	t.Parallel()
	u, stop, stderr := labServe(t, "--addr", "0.0.0.0:0", "--dir", t.TempDir(), "--postgres-url", testenv.PostgresURL(t))
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	token, ok := strings.CutPrefix(parsed.Fragment, "token=")
	require.True(t, ok, "the URL carries the token: %s", u)
	require.Len(t, token, 32)
	base := "http://127.0.0.1:" + parsed.Port() + "/"

	code, _ := get(t, base+"api/info")
	require.Equal(t, http.StatusOK, code, "reading needs no token")
	run := `{"runs":[{"strategy":"none","nodes":1,"tick":"100ms","work":"10ms","duration":"200ms"}]}`
	code, body := post(t, base, "api/groups", run)
	require.Equal(t, http.StatusUnauthorized, code, body)
	code, body = post(t, base, "api/groups", run, dashboard.TokenHeader, "not-"+token)
	require.Equal(t, http.StatusForbidden, code, body)
	code, body = post(t, base, "api/groups", run, dashboard.TokenHeader, token)
	require.Equal(t, http.StatusCreated, code, body)
	require.Equal(t, 0, stop(), "stderr:\n%s", stderr())
}

// A token given on the command line is required, and not printed.
func TestLabGivenToken(t *testing.T) {
	t.Parallel()
	u, stop, _ := labServe(t, "--addr", "127.0.0.1:0", "--token", "given-secret", "--dir", t.TempDir(), "--postgres-url", testenv.PostgresURL(t))
	require.NotContains(t, u, "given-secret")
	code, body := post(t, u, "api/groups", `{"runs":[{"strategy":"mutex"}]}`)
	require.Equal(t, http.StatusUnauthorized, code, body)
	code, body = post(t, u, "api/groups", `{"runs":[{"strategy":"mutex"}]}`, dashboard.TokenHeader, "given-secret")
	require.Equal(t, http.StatusBadRequest, code, "past the token, the request itself is checked: %s", body)
	require.Equal(t, 0, stop())
}
