package cli

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

func TestConsoleHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, "help", "console")
	require.Equal(t, 0, code)
	golden(t, "help-console.golden", stdout)
}

// A --trace-url the console cannot use is a usage error, before the
// store is opened, and is not echoed (it could carry a password).
func TestConsoleTraceURLChecked(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, want string }{
		{"http://localhost:16686/trace/", "--trace-url has no {trace_id}, where an attempt's trace id goes"},
		{"ftp://traces.example/{trace_id}", "--trace-url is not an http or https URL with a host"},
		{"https://ops:hunter2@traces.example/{trace_id}", "--trace-url carries a user or password, which every page would show"},
		// Every link would have a port of hex letters.
		{"http://traces.example:{trace_id}/", "--trace-url does not parse as a URL"},
	} {
		code, stdout, stderr := run(t, "console", "--store", filepath.Join(t.TempDir(), "none.db"), "--trace-url", tt.url)
		require.Equal(t, 2, code, "%s: %s", tt.url, stderr)
		require.Contains(t, stderr, tt.want, tt.url)
		require.NotContains(t, stdout+stderr, "hunter2")
	}
}

// aegis console --trace-url links an attempt that has a trace id to its
// trace.
func TestConsoleLinksTraces(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aegis.db")
	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = schedule.NewStore(t.Context(), db, nil)
	require.NoError(t, err)
	// As a scheduler that traces leaves an attempt.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	_, err = db.Exec(`INSERT INTO aegis_schedule_run_attempt (namespace, job, fire_ms, token, attempt, node, outcome, claimed_ms, ended_ms, trace_id)
		VALUES ('default', 'report', 1767261600000, 7, 1, 'web-1', 'succeeded', 1767261600000, 1767261600005, ?1)`, traceID)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testenv.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- Main(ctx, []string{"console", "--addr", "127.0.0.1:0", "--store", path, "--trace-url", "http://localhost:16686/trace/{trace_id}"}, &stdout, &stderr)
	}()
	at := regexp.MustCompile(`aegis console: at (http://\S+/)`)
	var m []string
	require.Eventually(t, func() bool {
		m = at.FindStringSubmatch(stdout.String())
		return m != nil
	}, 20*time.Second, 10*time.Millisecond, "the console says where it serves: %s%s", &stdout, &stderr)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(m[1] + "schedules/report")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `<a class="trace" href="http://localhost:16686/trace/`+traceID+`" rel="noreferrer">`+traceID+`</a>`)
	cancel()
	require.Equal(t, 0, testenv.Recv(t, exited, 10*time.Second, "the console to stop"), "%s", &stderr)
}
