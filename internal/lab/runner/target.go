package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/aegislab/aegis/internal/lab"

	"github.com/aegislab/aegis/internal/lab/checker"
)

// target returns the node a fault targets: nodeN; for holder the node
// doing its work inside the critical section now (it has read, and not
// begun its write), or else the next one to enter it; for writer the node
// inside its write now, or else the next one to begin a write.
func (r *Run) target(ctx context.Context, ch lab.Chaos) (*nodeProc, string, error) {
	np, detail, err := r.findTarget(ctx, ch)
	if np != nil {
		r.mu.Lock()
		np.faulted = true
		r.mu.Unlock()
	}
	return np, detail, err
}

func (r *Run) findTarget(ctx context.Context, ch lab.Chaos) (*nodeProc, string, error) {
	switch ch.Target {
	case lab.Holder:
		return r.holder(ctx)
	case lab.Writer:
		return r.writer(ctx)
	}
	return r.node(ch.Node()), "", nil
}

func (r *Run) holder(ctx context.Context) (*nodeProc, string, error) {
	since := time.Now()
	r.mu.Lock()
	for _, id := range r.order {
		a := r.sections[id]
		np := r.nodes[a.Node-1]
		if np.critical == id && !np.paused && !np.writing && a.ReadResult == checker.OpOK {
			r.mu.Unlock()
			return np, holderDetail(a.Job, a.Tick, a.Token), nil
		}
	}
	r.mu.Unlock()
	e, err := r.waitEvent(ctx, func(e lab.Event) bool {
		if e.Kind != lab.EventEntered {
			return false
		}
		return !r.nodes[e.Node-1].paused // r.mu is held by addLocked
	})
	if err != nil {
		return nil, "", fmt.Errorf("no node entered the critical section in the %s it waited, to the run's end: nothing to target", waited(since))
	}
	return r.node(e.Node), holderDetail(e.Job, e.Tick, e.Token), nil
}

// writer returns the node inside its write to the store now (of several,
// the last to begin: the least likely to be done before the fault lands),
// or else the next node to begin a write. It reads the nodes' events: a
// node is inside its write from its writing event to the attempt's
// outcome (executed, stale, abandoned) or the end of its process.
func (r *Run) writer(ctx context.Context) (*nodeProc, string, error) {
	since := time.Now()
	r.mu.Lock()
	inside := map[int]map[string]int{} // node → attempt → index of its writing event
	for i, e := range r.events {
		if e.Node == 0 {
			continue
		}
		switch e.Kind {
		case lab.EventWriting:
			if inside[e.Node] == nil {
				inside[e.Node] = map[string]int{}
			}
			inside[e.Node][e.Attempt] = i
		case lab.EventExecuted, lab.EventStale, lab.EventAbandon:
			delete(inside[e.Node], e.Attempt)
		case lab.EventStarted, lab.EventExited:
			delete(inside, e.Node)
		}
	}
	last := -1
	for n, attempts := range inside {
		if np := r.nodes[n-1]; np.paused || np.killed {
			continue
		}
		for _, i := range attempts {
			last = max(last, i)
		}
	}
	if last >= 0 {
		e := r.events[last]
		np := r.nodes[e.Node-1]
		r.mu.Unlock()
		return np, writerDetail(e.Job, e.Tick, e.Token), nil
	}
	r.mu.Unlock()
	e, err := r.waitEvent(ctx, func(e lab.Event) bool {
		if e.Kind != lab.EventWriting {
			return false
		}
		np := r.nodes[e.Node-1] // r.mu is held by addLocked
		return !np.paused && !np.killed
	})
	if err != nil {
		return nil, "", fmt.Errorf("no node began a write to the store in the %s it waited, to the run's end: nothing to target", waited(since))
	}
	return r.node(e.Node), writerDetail(e.Job, e.Tick, e.Token), nil
}

// waited is the time since a fault began to wait for its target.
func waited(since time.Time) time.Duration { return time.Since(since).Round(time.Millisecond) }

func writerDetail(job string, tick int, token int64) string {
	if token == 0 {
		return fmt.Sprintf(", the writer, inside its write of %s tick %d", job, tick)
	}
	return fmt.Sprintf(", the writer, inside its write of %s tick %d with token %d", job, tick, token)
}

func holderDetail(job string, tick int, token int64) string {
	if token == 0 {
		return fmt.Sprintf(", the holder, inside %s tick %d", job, tick)
	}
	return fmt.Sprintf(", the holder, inside %s tick %d with token %d", job, tick, token)
}
