package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
)

// target returns the node a fault targets: nodeN; for holder the node
// doing its work inside the critical section now (it has read, and not
// begun its write), or else the next one to enter it; for writer the node
// inside its write now, or else the next one to begin a write; for
// committer the next node to commit, as soon as it says so; for leader
// the node that leads now, or else the next one elected.
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
	case lab.Committer:
		return r.committer(ctx)
	case lab.Leader:
		return r.leader(ctx)
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

// committer returns the next node to report a commit, not paused, as soon
// as it has: its run succeeded, and its scheduler may not have recorded
// the run's end yet.
func (r *Run) committer(ctx context.Context) (*nodeProc, string, error) {
	since := time.Now()
	e, err := r.waitEvent(ctx, func(e lab.Event) bool {
		// r.mu is held by addLocked. Two faults waiting together take two
		// commits, not one.
		if e.Kind != lab.EventExecuted || r.struck[e.Attempt] {
			return false
		}
		if np := r.nodes[e.Node-1]; np.paused || np.killed {
			return false
		}
		if r.struck == nil {
			r.struck = map[string]bool{}
		}
		r.struck[e.Attempt] = true
		return true
	})
	if err != nil {
		return nil, "", fmt.Errorf("no node committed a tick in the %s it waited, to the run's end: nothing to target", waited(since))
	}
	detail := fmt.Sprintf(", the committer, right after it committed %s tick %d", e.Job, e.Tick)
	if e.Token != 0 {
		detail += fmt.Sprintf(" with token %d", e.Token)
	}
	return r.node(e.Node), detail, nil
}

// leader returns the node that leads now (leader mode): the node of the
// last elected event, when that event came from its current process and
// it is not paused; or else the next node elected.
func (r *Run) leader(ctx context.Context) (*nodeProc, string, error) {
	since := time.Now()
	r.mu.Lock()
	last := -1
	for i, e := range r.events {
		switch {
		case e.Kind == lab.EventElected && e.Node > 0:
			last = i
		case e.Kind == lab.EventStarted && last >= 0 && r.events[last].Node == e.Node:
			last = -1 // the leader's process was started again since
		}
	}
	if last >= 0 {
		e := r.events[last]
		if np := r.nodes[e.Node-1]; !np.paused && !np.killed {
			r.mu.Unlock()
			return np, leaderDetail(e.Token), nil
		}
	}
	r.mu.Unlock()
	e, err := r.waitEvent(ctx, func(e lab.Event) bool {
		if e.Kind != lab.EventElected || e.Node == 0 {
			return false
		}
		np := r.nodes[e.Node-1] // r.mu is held by addLocked
		return !np.paused && !np.killed
	})
	if err != nil {
		return nil, "", fmt.Errorf("no node was elected in the %s it waited, to the run's end: nothing to target", waited(since))
	}
	return r.node(e.Node), leaderDetail(e.Token), nil
}

func leaderDetail(term int64) string {
	return fmt.Sprintf(", the leader (its term's token %d)", term)
}
