package runner

import (
	"fmt"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
)

// The lab's record of a run, from its nodes' events: who is inside which
// critical section, and the history the checker reads (a read and a write
// operation per critical section, a claim per optimistic grant).

// jobTick names one tick of one job.
type jobTick struct {
	Job  string
	Tick int
}

// sectionRecord is what the lab saw of one critical section.
type sectionRecord struct {
	ID    string
	Job   string
	Node  int
	Tick  int
	Token int64
	Owner string
	Run   int // the run's attempt
	// The read: from enter to entered (or its refusal, or abandon).
	ReadCall, ReadReturn int64
	ReadResult           checker.OpResult
	Read                 int64
	// The write: from writing to executed (or its refusal, or abandon);
	// WriteCall 0 when it never began.
	WriteCall, WriteReturn int64
	WriteResult            checker.OpResult
	// Stamp is its EXECUTED row's at_ms as the node reported it (0 when
	// it did not know it: a retry found the row there).
	Stamp int64
}

// claimRecord is an optimistic grant: it registered its version.
type claimRecord struct {
	Job   string
	Node  int
	Token int64
	Call  int64
	At    int64
}

// onNodeEvent records a node's event and updates what the lab knows.
func (r *Run) onNodeEvent(np *nodeProc, ev lab.NodeEvent, ready chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Kind == lab.EvPong {
		select {
		case np.pong <- ev.Ping:
		default: // nobody waits for so many
		}
		return
	}
	e := lab.Event{T: r.secs(ev.At), Kind: ev.Kind, Node: np.n, Job: ev.Job, Tick: ev.Tick, Token: ev.Token, Attempt: ev.Attempt, Value: ev.Value, Held: ev.Held, Detail: ev.Detail}
	if ev.Until != 0 {
		e.Until = r.secs(ev.Until)
	}
	if ev.Granted != 0 {
		e.Granted = r.secs(ev.Granted)
	}
	jt := jobTick{ev.Job, ev.Tick}
	var derived []lab.Event
	switch ev.Kind {
	case lab.EvReady:
		close(ready)
		e.T = 0
		e.Detail = fmt.Sprintf("ready %s after it was started (%s)", time.Unix(0, ev.At).Sub(np.spawned).Round(time.Millisecond), ev.Detail)
	case lab.EvAcquired:
		np.holding, np.tick, np.job = ev.Token, ev.Tick, ev.Job
		r.open[runKey(np.n, jt, ev.RunAttempt)] = openRun{node: np.n, jt: jt}
	case lab.EvClaimed:
		r.claims = append(r.claims, claimRecord{Job: ev.Job, Node: np.n, Token: ev.Token, Call: min(ev.Since, ev.At), At: ev.At})
	case lab.EvReleased:
		np.holding = -1
	case lab.EvEnter, lab.EvEntered, lab.EvWriting, lab.EvExecuted, lab.EvStale, lab.EvAbandon:
		derived = r.onSectionLocked(np, ev, e.T)
	case lab.EvFinished:
		np.finished = true
	case lab.EvError:
		np.lastErr = ev.Detail
	case lab.EvMisfired:
		np.late = max(np.late, time.Duration(ev.Late))
	}
	if ev.Kind == lab.EvReleased {
		delete(r.open, runKey(np.n, jt, ev.RunAttempt))
	}
	r.addLocked(e)
	for _, d := range derived {
		r.addLocked(d)
	}
	if len(r.deferred) > 0 {
		r.settleLocked()
	}
}

// onSectionLocked records an event of a critical section (enter, entered,
// writing, and its outcome: executed, stale, abandoned) at t, and returns
// the events it implies (a tick committed a second time).
func (r *Run) onSectionLocked(np *nodeProc, ev lab.NodeEvent, t float64) (derived []lab.Event) {
	jt := jobTick{ev.Job, ev.Tick}
	sec := r.sections[ev.Attempt]
	switch ev.Kind {
	case lab.EvEnter:
		r.sections[ev.Attempt] = &sectionRecord{ID: ev.Attempt, Job: ev.Job, Node: np.n, Tick: ev.Tick, Token: ev.Token,
			Owner: ev.Owner, Run: ev.RunAttempt, ReadCall: ev.At, ReadResult: checker.OpUnknown, Read: -1}
		r.order = append(r.order, ev.Attempt)
		np.critical, np.writing = ev.Attempt, false
	case lab.EvEntered:
		if sec != nil && ev.Value != nil {
			sec.Read, sec.ReadResult, sec.ReadReturn = *ev.Value, checker.OpOK, ev.At
		}
		r.entered[jt]++
	case lab.EvWriting:
		np.writing = true
		if sec != nil {
			sec.WriteCall, sec.WriteResult = ev.At, checker.OpUnknown
		}
	case lab.EvExecuted:
		if sec != nil {
			sec.WriteResult, sec.WriteReturn, sec.Stamp = checker.OpOK, ev.At, ev.Stamp
		}
		np.critical, np.writing = "", false
		r.executed[jt]++
		if r.executed[jt] == 2 {
			derived = append(derived, lab.Event{T: t, Kind: lab.EventDuplicate, Job: ev.Job, Tick: ev.Tick, Node: np.n,
				Detail: fmt.Sprintf("%s tick %d committed a second time", ev.Job, ev.Tick)})
		}
	case lab.EvStale:
		if sec != nil {
			if sec.WriteCall != 0 {
				sec.WriteResult, sec.WriteReturn = checker.OpRefused, ev.At
			} else {
				sec.ReadResult, sec.ReadReturn = checker.OpRefused, ev.At
			}
		}
		np.critical, np.writing = "", false
		r.stale++
	case lab.EvAbandon:
		// Failed: a read or a commit whose answer was lost may still have
		// landed; the outcome stays unknown, with a return time.
		if sec != nil {
			if sec.WriteCall != 0 {
				sec.WriteReturn = ev.At
			} else {
				sec.ReadReturn = ev.At
			}
		}
		np.critical, np.writing = "", false
	}
	return derived
}
