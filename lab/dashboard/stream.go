package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Server-sent events. Two streams:
//
//   - /api/stream: "groups", the list of groups and their runs, at once and
//     at every change (a run starting, ending, a preset moving on);
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
			from = n + 1
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

// keepAlive is how often an idle groups stream sends a comment, so that
// proxies and browsers keep it open.
const keepAlive = 15 * time.Second

func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	out := startSSE(w)
	ticker := time.NewTicker(keepAlive)
	defer ticker.Stop()
	for {
		s.mu.Lock()
		v := s.viewGroupsLocked()
		changed := s.changed
		s.mu.Unlock()
		if out.send("groups", -1, v) != nil || out.flush() != nil {
			return
		}
	wait:
		for {
			select {
			case <-changed:
				// Let a burst of changes (a preset's runs starting) settle.
				if !sleepCtx(r.Context(), 100*time.Millisecond) {
					return
				}
				break wait
			case <-ticker.C:
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || out.flush() != nil {
					return
				}
			case <-r.Context().Done():
				return
			case <-s.ctx.Done():
				return
			}
		}
	}
}
