package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/internal/backoff"
)

// Server-sent events. Two streams:
//
//   - /api/stream: "groups", the list of groups and their runs, at once and
//     at every change (a run starting, ending, a preset moving on), and the
//     events, status and end of the runs named in ?watch= (the page's one
//     stream: see handleStream);
//   - /api/runs/{id}/events: "lab", every event of the run, replayed from
//     the first (or from ?from=N, or after the Last-Event-ID a reconnecting
//     EventSource sends), each with its index as id; "status", the run's
//     state (holder, token, nodes, counts so far) within 100 ms of events
//     and every half second; and "end", the report's counts and
//     verdict, after which the stream closes.

// sseWriter writes server-sent events.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	_, _ = fmt.Fprint(w, "retry: 1000\n\n")
	_ = s.rc.Flush()
	return s
}

// send writes one event; id < 0 writes none. It does not flush.
func (s *sseWriter) send(event string, id int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var sb strings.Builder
	if id >= 0 {
		fmt.Fprintf(&sb, "id: %d\n", id)
	}
	fmt.Fprintf(&sb, "event: %s\ndata: %s\n\n", event, b)
	_, err = s.w.Write([]byte(sb.String()))
	return err
}

func (s *sseWriter) flush() error { return s.rc.Flush() }

// A run's stream sends its status at most every statusCheck after events,
// and every statusEvery when nothing happens (the elapsed time moves; it
// also keeps the connection alive).
const (
	statusCheck = 100 * time.Millisecond
	statusEvery = 500 * time.Millisecond
)

// endEvent is the last event of a run's stream.
type endEvent struct {
	Report *reportView `json:"report,omitempty"`
	Error  string      `json:"error,omitempty"`
}

func (s *Server) handleRunEvents(w http.ResponseWriter, r *http.Request) {
	e, run := s.lookupRun(w, r)
	if e == nil {
		return
	}
	from := 0
	if v := r.URL.Query().Get("from"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("from %q: want an event index, 0 or more", v))
			return
		}
		from = n
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			from = n + min(1, math.MaxInt-n) // no overflow to a negative index
		}
	}
	events, cancel := run.Subscribe(from)
	defer cancel()
	out := startSSE(w)
	ticker := time.NewTicker(statusCheck)
	defer ticker.Stop()
	i := from
	dirty, last := true, time.Time{} // status owed; when it was last sent
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				_ = out.send("status", -1, run.Status())
				end := endEvent{}
				rep, err := run.Wait(r.Context())
				if err != nil {
					end.Error = err.Error()
				}
				end.Report = viewReport(run.ID, rep)
				_ = out.send("end", -1, end)
				_ = out.flush()
				return
			}
			if err := out.send("lab", i, ev); err != nil {
				return
			}
			i++
			dirty = true
			if len(events) > 0 {
				continue // the rest of the burst first
			}
			if out.flush() != nil {
				return
			}
		case now := <-ticker.C:
			if !dirty && now.Sub(last) < statusEvery {
				continue
			}
			if out.send("status", -1, run.Status()) != nil || out.flush() != nil {
				return
			}
			dirty, last = false, now
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// keepAlive is how often an idle stream sends a comment, so that proxies
// and browsers keep it open.
const keepAlive = 15 * time.Second

// maxWatch bounds the runs one stream follows.
const maxWatch = 64

// watch is one run a stream follows, from its from-th event.
type watch struct {
	id   string
	from int
}

// parseWatch reads ?watch=ID:FROM,ID:FROM (FROM may be left out: 0).
func parseWatch(v string) ([]watch, error) {
	var out []watch
	if v == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(v, ",") {
		id, from, _ := strings.Cut(part, ":")
		w := watch{id: id}
		if from != "" {
			n, err := strconv.Atoi(from)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("watch %q: want RUN:FROM, FROM an event index, 0 or more", part)
			}
			w.from = n
		}
		if id == "" {
			return nil, fmt.Errorf("watch %q: want RUN:FROM", part)
		}
		out = append(out, w)
	}
	if len(out) > maxWatch {
		return nil, fmt.Errorf("watch: %d runs: want at most %d on one stream", len(out), maxWatch)
	}
	return out, nil
}

// Events of the multiplexed stream, each naming its run.
type (
	labBatch struct {
		Run    string      `json:"run"`
		From   int         `json:"from"` // the index of the first event
		Events []lab.Event `json:"events"`
	}
	statusEvent struct {
		Run    string        `json:"run"`
		Status runner.Status `json:"status"`
	}
	runEnd struct {
		Run string `json:"run"`
		endEvent
	}
)

// follower is one followed run's events, gathered for the stream's loop.
type follower struct {
	run     *runner.Run
	next    int // the index of the first event in pending
	pending []lab.Event
	closed  bool    // the run's events ended and its report is ready
	end     *runEnd // then: its end
	ended   bool    // its end was sent
	dirty   bool    // a status is owed
}

// handleStream is the page's one event stream (a browser keeps at most six
// connections to a host, so one stream per run would starve the page's
// requests): "groups" at once and at every change, and for each run named
// in ?watch=ID:FROM,… its events from the FROM-th in batches ("lab"), its
// status ("status", as a run's own stream sends it) and its end ("end").
// The page reopens the stream with new FROMs when what it shows changes.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	watches, err := parseWatch(r.URL.Query().Get("watch"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	st := &stream{s: s, wake: make(chan struct{}, 1)}
	defer st.wg.Wait()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st.follow(ctx, watches)
	st.out = startSSE(w)
	ticker := time.NewTicker(statusCheck)
	defer ticker.Stop()
	if st.sendGroups() != nil || st.out.flush() != nil {
		return
	}
	st.lastWrite = time.Now()
	st.loop(r.Context(), ticker.C)
}

// stream is one connection of the page's stream: the runs it follows,
// each gathered by a goroutine of its own, and what the connection's loop
// (the handler's goroutine) last sent.
type stream struct {
	s   *Server
	out *sseWriter
	wg  sync.WaitGroup // the followers' goroutines

	mu        sync.Mutex    // guards the fields of the followers
	followers []*follower   // the slice itself: the handler's goroutine only
	wake      chan struct{} // a follower gathered something

	// The loop's own.
	changed               chan struct{} // closed at the groups' next change
	lastStatus, lastWrite time.Time
}

// poke wakes the loop, unless a wake is already owed.
func (st *stream) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// follow subscribes to each watched run the server knows, from its FROM,
// and gathers its events until ctx ends.
func (st *stream) follow(ctx context.Context, watches []watch) {
	for _, wt := range watches {
		st.s.mu.Lock()
		e := st.s.runs[wt.id]
		st.s.mu.Unlock()
		if e == nil || e.run == nil {
			continue // forgotten: the page learns it from the groups
		}
		f := &follower{run: e.run, next: wt.from, dirty: true}
		st.followers = append(st.followers, f)
		events, unsubscribe := e.run.Subscribe(wt.from)
		st.wg.Go(func() {
			defer unsubscribe()
			st.gather(ctx, f, events)
		})
	}
}

// gather adds each of f's events to its pending ones, then its end when
// they end, poking the loop each time.
func (st *stream) gather(ctx context.Context, f *follower, events <-chan lab.Event) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				// The report is built after the last event: wait for it
				// here, not in the stream's loop.
				end := runEnd{Run: f.run.ID}
				rep, err := f.run.Wait(ctx)
				if err != nil {
					end.Error = err.Error()
				}
				end.Report = viewReport(f.run.ID, rep)
				st.mu.Lock()
				f.end, f.closed = &end, true
				st.mu.Unlock()
				st.poke()
				return
			}
			st.mu.Lock()
			f.pending = append(f.pending, ev)
			st.mu.Unlock()
			st.poke()
		case <-ctx.Done():
			return
		}
	}
}

// loop writes to the stream until ctx (the request's) or the server ends,
// or a write fails: the followers' batches when they wake it, statuses at
// ticks, the groups when they change.
func (st *stream) loop(ctx context.Context, ticks <-chan time.Time) {
	for {
		select {
		case <-st.wake:
			// Let a burst of events gather: one batch per run per check.
			if !backoff.Sleep(ctx, statusCheck/4) {
				return
			}
			if st.flushRuns(false) != nil {
				return
			}
		case now := <-ticks:
			if st.tick(now) != nil {
				return
			}
		case <-st.changed:
			// Let a burst of changes (a preset's runs starting) settle.
			if !backoff.Sleep(ctx, 100*time.Millisecond) {
				return
			}
			if st.sendGroups() != nil || st.out.flush() != nil {
				return
			}
		case <-ctx.Done():
			return
		case <-st.s.ctx.Done():
			return
		}
	}
}

// sendGroups sends the groups, and notes the channel of their next change.
func (st *stream) sendGroups() error {
	st.s.mu.Lock()
	v := st.s.viewGroupsLocked()
	st.changed = st.s.changed
	st.s.mu.Unlock()
	return st.out.send("groups", -1, v)
}

// tick sends what the followers gathered, with the statuses when owed
// after events or due anyway, and a keep-alive comment when the stream
// has been idle for keepAlive.
func (st *stream) tick(now time.Time) error {
	statuses := st.statusOwed() || now.Sub(st.lastStatus) >= statusEvery
	if statuses {
		st.lastStatus = now
	}
	if err := st.flushRuns(statuses); err != nil {
		return err
	}
	if now.Sub(st.lastWrite) >= keepAlive {
		if _, err := fmt.Fprint(st.out.w, ": keep-alive\n\n"); err != nil {
			return err
		}
		if err := st.out.flush(); err != nil {
			return err
		}
		st.lastWrite = now
	}
	return nil
}

// statusOwed reports whether a running run's status is owed after events.
func (st *stream) statusOwed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, f := range st.followers {
		if f.dirty && !f.ended {
			return true
		}
	}
	return false
}

// runBatch is what flushRuns takes from one follower: its events from
// the from-th, and its end when the run has closed and its end is unsent.
type runBatch struct {
	f      *follower
	from   int
	events []lab.Event
	closed bool
	end    *runEnd
}

// flushRuns sends what the followers gathered; with statuses, every
// running run's status (owed after events, or due anyway).
func (st *stream) flushRuns(statuses bool) error {
	batches := st.takeBatches()
	for _, b := range batches {
		if err := st.sendBatch(b); err != nil {
			return err
		}
	}
	if statuses {
		for _, run := range st.takeDue() {
			if err := st.out.send("status", -1, statusEvent{Run: run.ID, Status: run.Status()}); err != nil {
				return err
			}
		}
	}
	if len(batches) > 0 || statuses {
		st.lastWrite = time.Now()
		return st.out.flush()
	}
	return nil
}

// takeBatches takes the followers' pending events and unsent ends, and
// marks their statuses owed.
func (st *stream) takeBatches() []runBatch {
	st.mu.Lock()
	defer st.mu.Unlock()
	var batches []runBatch
	for _, f := range st.followers {
		if len(f.pending) > 0 || (f.closed && !f.ended) {
			batches = append(batches, runBatch{f, f.next, f.pending, f.closed && !f.ended, f.end})
			f.next += len(f.pending)
			f.pending = nil
			f.dirty = true
			if f.closed {
				f.ended = true
			}
		}
	}
	return batches
}

// sendBatch sends a run's events, then, when it has closed, its last
// status and its end.
func (st *stream) sendBatch(b runBatch) error {
	if len(b.events) > 0 {
		if err := st.out.send("lab", -1, labBatch{Run: b.f.run.ID, From: b.from, Events: b.events}); err != nil {
			return err
		}
	}
	if b.closed {
		if err := st.out.send("status", -1, statusEvent{Run: b.f.run.ID, Status: b.f.run.Status()}); err != nil {
			return err
		}
		if err := st.out.send("end", -1, b.end); err != nil {
			return err
		}
	}
	return nil
}

// takeDue returns the runs whose status is due (those not ended), and
// marks their statuses paid.
func (st *stream) takeDue() []*runner.Run {
	st.mu.Lock()
	defer st.mu.Unlock()
	var due []*runner.Run
	for _, f := range st.followers {
		if !f.ended {
			due = append(due, f.run)
			f.dirty = false
		}
	}
	return due
}
