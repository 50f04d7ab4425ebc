package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
	"github.com/aegislab/aegis/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// cases are the stories told to a real Jaeger: each exports its spans
// with [backend.provider] and reads them back with [backend.trace].
var cases = []struct {
	name string
	run  func(t *testing.T, b *backend)
}{
	{"FencedRefusalThroughTwoSchedulers", fencedRefusalThroughTwoSchedulers},
	{"ExampleProgram", exampleProgram},
	{"JobEnqueuedInsideARun", jobEnqueuedInsideARun},
}

// TestJaeger runs every case against the Jaeger that `scripts/services
// start jaeger` runs (make test-jaeger starts it): a case fails, never
// skips, when it does not answer.
func TestJaeger(t *testing.T) {
	b := jaeger(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, b)
		})
	}
}

// fencedRefusalThroughTwoSchedulers: two schedule.Scheduler replicas in
// run-key mode, each exporting OTLP to Jaeger as a service of its own,
// share a SQLite store. The holder's run of a tick is held past its
// lease; the successor reclaims the tick and writes through the fence;
// the holder's late write is refused. Jaeger returns each run as a trace
// (the run's span its root, the fence check its child), the holder's
// with the refusal event naming both tokens; the console's link to an
// attempt's trace, with --trace-url at Jaeger's UI, names the trace
// Jaeger returns for that attempt.
func fencedRefusalThroughTwoSchedulers(t *testing.T, b *backend) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "aegis.db")
	// Each replica has a handle of its own, as two processes have.
	replica := func() (*schedule.Store, func(context.Context) error) {
		db, err := sqlitelease.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		store, err := schedule.NewStore(ctx, db, nil)
		require.NoError(t, err)
		require.NoError(t, fence.MigrateSQL(ctx, db))
		write := func(ctx context.Context) error {
			token, _ := schedule.TokenFrom(ctx)
			wctx := context.WithoutCancel(ctx) // a held run writes after its context ended
			tx, err := db.BeginTx(wctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := fence.CheckSQL(wctx, tx, "nightly", token); err != nil {
				return err
			}
			return tx.Commit()
		}
		return store, write
	}
	holderStore, holderWrite := replica()
	successorStore, successorWrite := replica()
	holderTP, successorTP := b.provider(t, "aegis-jaeger-test-holder"), b.provider(t, "aegis-jaeger-test-successor")

	clock := schedule.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	resume := make(chan struct{})
	var resumeOnce sync.Once
	t.Cleanup(func() { resumeOnce.Do(func() { close(resume) }) })
	started := make(chan struct{}, 1)
	var heldErr error
	holder := start(t, &schedule.Config{Node: "holder", Store: holderStore, Clock: clock, ReapInterval: time.Hour, TracerProvider: holderTP}, schedule.Job{
		Name: "nightly", Every: time.Hour, LockAtMostFor: 300 * time.Millisecond, DisableKeepAlive: true,
		Run: func(ctx context.Context) error {
			started <- struct{}{}
			select { // held until the successor wrote, or a minute when the test failed before
			case <-resume:
			case <-time.After(time.Minute):
			}
			heldErr = holderWrite(ctx)
			return heldErr
		},
	})
	historytest.AdvanceWhenWaiting(t, clock, time.Hour)
	testenv.Recv(t, started, 10*time.Second, "the holder's run")
	wrote := make(chan error, 1)
	successor := start(t, &schedule.Config{Node: "successor", Store: successorStore, Clock: clock, ReapInterval: 20 * time.Millisecond, TracerProvider: successorTP}, schedule.Job{
		Name: "nightly", Every: time.Hour, LockAtMostFor: 5 * time.Second,
		Run: func(ctx context.Context) error { err := successorWrite(ctx); wrote <- err; return err },
	})
	require.NoError(t, testenv.Recv(t, wrote, 10*time.Second, "the successor's write"))
	resumeOnce.Do(func() { close(resume) })

	db, err := sqlitelease.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	reader, err := schedule.NewRunReader(ctx, db, nil)
	require.NoError(t, err)
	var as []schedule.Attempt
	require.Eventually(t, func() bool {
		as, err = reader.Attempts(ctx, "nightly", 10)
		return err == nil && len(as) == 2 && as[1].Outcome == "refused"
	}, 10*time.Second, 10*time.Millisecond, "the holder's refused end on record: %+v %v", &as, &err)
	stop(t, holder)
	stop(t, successor)
	require.ErrorIs(t, heldErr, aegis.ErrStale)
	// Their spans have ended: flush them to Jaeger.
	require.NoError(t, holderTP.Shutdown(ctx))
	require.NoError(t, successorTP.Shutdown(ctx))

	tokens := map[string]int64{} // by node
	traceIDs := map[string]string{}
	for _, a := range as {
		tokens[a.Node], traceIDs[a.Node] = int64(a.Token), a.TraceID
	}
	require.Len(t, traceIDs, 2, "an attempt per replica: %+v", as)

	for _, node := range []string{"holder", "successor"} {
		tr := b.trace(t, traceIDs[node], func(tr jaegerTrace) bool {
			return len(tr.named("aegis.schedule.run")) == 1 && len(tr.named("aegis.fence.check")) == 1
		})
		run := tr.named("aegis.schedule.run")[0]
		require.Equal(t, "aegis-jaeger-test-"+node, tr.service(run), "the %s's run is exported by its replica", node)
		require.Equal(t, node, run.tag(string(tracing.AttrNode)))
		require.Equal(t, "nightly", run.tag(string(tracing.AttrKey)))
		require.Equal(t, fmt.Sprint(tokens[node]), run.tag(string(tracing.AttrToken)))
		require.Empty(t, run.parent(), "the %s's run is its trace's root", node)

		check := tr.named("aegis.fence.check")[0]
		require.Equal(t, run.SpanID, check.parent(), "the %s's fence check is a child of its run", node)
		require.Equal(t, "aegis-jaeger-test-"+node, tr.service(check))
		for _, s := range tr.Spans {
			if p := s.parent(); p != "" {
				require.NotNil(t, tr.span(p), "%s's parent %s is in the trace Jaeger returns", s.OperationName, p)
			}
		}
		refusals := check.logsNamed(tracing.EventRefused)
		if node == "successor" {
			require.Empty(t, refusals, "the successor's write is not refused")
			continue
		}
		require.Len(t, refusals, 1, "the holder's late write is refused: %+v", check.Logs)
		require.Equal(t, "ERROR", check.tag("otel.status_code"))
		require.Equal(t, fmt.Sprint(tokens["holder"]), refusals[0].field(string(tracing.AttrToken)), "the writer's token")
		require.Equal(t, fmt.Sprint(tokens["successor"]), refusals[0].field(string(tracing.AttrCurrent)), "the token the fence held")
	}

	// The console over the same store, linking attempts to Jaeger's UI as
	// `aegis console --trace-url http://127.0.0.1:16686/trace/{trace_id}` does.
	srv, err := console.New(ctx, &console.Config{DB: db, Addr: "127.0.0.1:0", TraceURL: b.query + "/trace/" + console.TracePlaceholder})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	page := b.get(t, ts.URL+"/schedules/nightly")
	// Each attempt's row (the page lists the tick's attempts twice: among
	// the ticks that ran twice, and in the full list) and its trace link.
	row := regexp.MustCompile(`^<tr data-job="nightly" data-state="(\w+)" data-token="(\d+)"`)
	link := regexp.MustCompile(`<a class="trace" href="([^"]+)"`)
	links := map[string]string{} // by outcome
	for _, tr := range strings.Split(page, "<tr ")[1:] {
		tr, _, _ = strings.Cut("<tr "+tr, "</tr>")
		if m := row.FindStringSubmatch(tr); m != nil {
			l := link.FindStringSubmatch(tr)
			require.NotNil(t, l, "the attempt's row links its trace: %s", tr)
			require.Contains(t, []string{"", l[1]}, links[m[1]], "one link per attempt")
			links[m[1]] = l[1]
		}
	}
	require.Len(t, links, 2, "the holder's refused attempt and the successor's:\n%s", page)
	for outcome, node := range map[string]string{"refused": "holder", "succeeded": "successor"} {
		id, ok := strings.CutPrefix(links[outcome], b.query+"/trace/")
		require.True(t, ok, "the %s attempt's link %q goes to Jaeger's trace page", outcome, links[outcome])
		require.Equal(t, traceIDs[node], id, "the %s attempt's link is its run's trace", outcome)
		tr := b.trace(t, id, func(jaegerTrace) bool { return true })
		require.Equal(t, id, tr.TraceID, "Jaeger returns the trace the console links to")
		runs := tr.named("aegis.schedule.run")
		require.Len(t, runs, 1)
		require.Equal(t, node, runs[0].tag(string(tracing.AttrNode)))
		refusals := 0
		for _, c := range tr.named("aegis.fence.check") {
			refusals += len(c.logsNamed(tracing.EventRefused))
		}
		require.Equal(t, map[string]int{"refused": 1, "succeeded": 0}[outcome], refusals, "the refusal in the %s attempt's trace", outcome)
		// The page Jaeger's UI serves there (a Jaeger built from the Go
		// module serves a placeholder: its UI's assets are built apart).
		require.Contains(t, b.get(t, links[outcome]), `<base href="/"`, "the link opens a page of Jaeger's UI")
	}
}

// exampleProgram: the example (main.go) exports its runs to Jaeger and
// prints links to their traces, which Jaeger returns: the run's span
// from the example's service, and a succeeded run's fence check its
// child.
func exampleProgram(t *testing.T, b *backend) {
	var out bytes.Buffer
	store := filepath.Join(t.TempDir(), "aegis.db")
	require.NoError(t, run(t.Context(), &out, options{endpoint: b.otlp, ui: b.query, store: store, runs: 2}))
	lines := regexp.MustCompile(`token (\d+)\s+(\w+)\s+`+regexp.QuoteMeta(b.query+"/trace/")+`(\w+)\n`).FindAllStringSubmatch(out.String(), -1)
	require.Len(t, lines, 2, "a link per run:\n%s", &out)
	for _, l := range lines {
		token, outcome, id := l[1], l[2], l[3]
		tr := b.trace(t, id, func(tr jaegerTrace) bool {
			return len(tr.named("aegis.schedule.run")) == 1 && (outcome != "succeeded" || len(tr.named("aegis.fence.check")) == 1)
		})
		span := tr.named("aegis.schedule.run")[0]
		require.Equal(t, service, tr.service(span))
		require.Equal(t, "invoice-export", span.tag(string(tracing.AttrKey)))
		require.Equal(t, token, span.tag(string(tracing.AttrToken)))
		if outcome == "succeeded" {
			require.Equal(t, span.SpanID, tr.named("aegis.fence.check")[0].parent(), "the run's fence check is its child")
		}
	}
	require.Contains(t, out.String(), "aegis console --store "+store+" --trace-url '"+b.query+"/trace/{trace_id}'")
}

// backend is the Jaeger the cases export to and read from.
type backend struct {
	otlp  string // its OTLP over HTTP endpoint
	query string // its UI and query API
	http  *http.Client
}

// jaeger returns the Jaeger of $AEGIS_JAEGER_OTLP_ENDPOINT and
// $AEGIS_JAEGER_QUERY_URL (by default the shared one's loopback
// addresses), checked within a bound: the test fails, naming the fix,
// when it does not answer.
func jaeger(t *testing.T) *backend {
	env := map[string]string{}
	for _, kv := range servers.SharedJaegerEnv() {
		env[kv[0]] = kv[1]
		if v := os.Getenv(kv[0]); v != "" {
			env[kv[0]] = v
		}
	}
	b := &backend{otlp: strings.TrimSuffix(env[servers.EnvJaegerOTLP], "/"), query: strings.TrimSuffix(env[servers.EnvJaegerQuery], "/"), http: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(b.http.CloseIdleConnections)
	resp, err := b.http.Get(b.query + "/api/services")
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET /api/services: %s", resp.Status)
		}
	}
	if err != nil {
		t.Fatalf("Jaeger's query API does not answer at %s (%s): %v\nstart it with `scripts/services start jaeger` (make test-jaeger does), then eval \"$(scripts/services env)\"", b.query, servers.EnvJaegerQuery, err)
	}
	return b
}

// provider returns a TracerProvider that exports to b over OTLP (its
// traces' path, as OTEL_EXPORTER_OTLP_ENDPOINT's), as the service named
// service, sampling every span; the test shuts it down.
func (b *backend) provider(t *testing.T, service string) *sdktrace.TracerProvider {
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(b.otlp+"/v1/traces"), otlptracehttp.WithHTTPClient(b.http))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(100*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) }) // before b.http's close, registered earlier
	return tp
}

// get returns the body of a 200 answer to GET u.
func (b *backend) get(t *testing.T, u string) string {
	t.Helper()
	resp, err := b.http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", u, body)
	return string(body)
}

// trace waits at most 30 s for Jaeger's query API to return the trace id
// with complete true (spans arrive in batches), and returns it; the test
// fails with what Jaeger last answered.
func (b *backend) trace(t *testing.T, id string, complete func(jaegerTrace) bool) jaegerTrace {
	t.Helper()
	require.Regexp(t, `^[0-9a-f]{32}$`, id, "a trace id")
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := b.http.Get(b.query + "/api/traces/" + id)
		if err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			last = fmt.Sprintf("%s: %.2000s", resp.Status, body)
			var r struct{ Data []jaegerTrace }
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			if resp.StatusCode == http.StatusOK && dec.Decode(&r) == nil && len(r.Data) == 1 && complete(r.Data[0]) {
				return r.Data[0]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger did not return trace %s complete within 30s; it last answered %s", id, last)
		}
		time.Sleep(100 * time.Millisecond) // a poll's interval, not a synchronisation
	}
}

// jaegerTrace is a trace as Jaeger's HTTP query API returns it (GET
// /api/traces/{id}, the UI's own API).
type jaegerTrace struct {
	TraceID   string `json:"traceID"`
	Spans     []jaegerSpan
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	}
}

type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	ProcessID     string `json:"processID"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	}
	Tags []jaegerField
	Logs []jaegerLog
}

// jaegerLog is an OpenTelemetry span event: its name is the field
// "event".
type jaegerLog struct {
	Fields []jaegerField
}

// jaegerField is a tag or a log's field; Value is a json.Number for
// numbers (an int64 beyond 2^53 stays exact).
type jaegerField struct {
	Key   string
	Value any
}

// named returns the spans of the operation name.
func (tr jaegerTrace) named(name string) []jaegerSpan {
	var out []jaegerSpan
	for _, s := range tr.Spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

// span returns the span id, or nil.
func (tr jaegerTrace) span(id string) *jaegerSpan {
	for i := range tr.Spans {
		if tr.Spans[i].SpanID == id {
			return &tr.Spans[i]
		}
	}
	return nil
}

// service returns the name of the service that exported s.
func (tr jaegerTrace) service(s jaegerSpan) string { return tr.Processes[s.ProcessID].ServiceName }

// parent returns the id of s's parent (its CHILD_OF reference), or "".
func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// tag returns the value of s's tag key as text, or "".
func (s jaegerSpan) tag(key string) string { return fieldOf(s.Tags, key) }

// logsNamed returns s's logs (OpenTelemetry's span events) named name.
func (s jaegerSpan) logsNamed(name string) []jaegerLog {
	var out []jaegerLog
	for _, l := range s.Logs {
		if fieldOf(l.Fields, "event") == name {
			out = append(out, l)
		}
	}
	return out
}

// field returns the value of l's field key as text, or "".
func (l jaegerLog) field(key string) string { return fieldOf(l.Fields, key) }

func fieldOf(fs []jaegerField, key string) string {
	for _, f := range fs {
		if f.Key == key {
			return fmt.Sprint(f.Value)
		}
	}
	return ""
}

// start starts a scheduler of cfg (run-key mode) running jobs; the test
// stops it.
func start(t *testing.T, cfg *schedule.Config, jobs ...schedule.Job) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(cfg)
	require.NoError(t, err)
	require.Equal(t, schedule.ModeRunKey, s.Mode())
	for _, j := range jobs {
		require.NoError(t, s.Add(j))
	}
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { stop(t, s) })
	return s
}

// stop stops s; the test fails when its jobs do not return within 30 s.
func stop(t *testing.T, s *schedule.Scheduler) {
	t.Helper()
	done := make(chan struct{})
	go func() { s.Stop(); close(done) }()
	testenv.Recv(t, done, 30*time.Second, "the scheduler to stop")
}
