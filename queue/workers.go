package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Worker runs the jobs of one kind of Args.
//
// Work's ctx is cancelled when the job's lease can no longer be trusted
// (context.Cause says why: aegis.ErrLost, ErrLeaseExpired, ErrStopping).
// Return nil to complete the job, Snooze(d) to run it again later, Cancel(err)
// to give it up, or any other error to retry it with backoff (or discard it
// after its last attempt). A panic is an error.
type Worker[T Args] interface {
	Work(ctx context.Context, job *Job[T]) error
}

// WorkFunc is a function that is a Worker.
type WorkFunc[T Args] func(ctx context.Context, job *Job[T]) error

// Work calls f.
func (f WorkFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// Workers maps kinds to their workers. Build it with NewWorkers and
// AddWorker before New; it is read-only afterwards.
type Workers struct {
	mu    sync.RWMutex
	kinds map[string]func(ctx context.Context, row *JobRow) error
}

// NewWorkers returns an empty set of workers.
func NewWorkers() *Workers {
	return &Workers{kinds: map[string]func(context.Context, *JobRow) error{}}
}

// AddWorker registers w for the kind of T (T's zero value's Kind). It
// panics when the kind is invalid or already registered, like
// http.ServeMux.Handle: that is a programming error.
func AddWorker[T Args](ws *Workers, w Worker[T]) {
	var zero T
	kind := zero.Kind()
	if err := checkKind(kind); err != nil {
		panic(fmt.Sprintf("queue: AddWorker[%T]: %v", zero, err))
	}
	if w == nil {
		panic(fmt.Sprintf("queue: AddWorker[%T]: worker is nil", zero))
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if _, ok := ws.kinds[kind]; ok {
		panic(fmt.Sprintf("queue: AddWorker[%T]: kind %q is already registered", zero, kind))
	}
	ws.kinds[kind] = func(ctx context.Context, row *JobRow) error {
		job := &Job[T]{JobRow: row}
		if err := json.Unmarshal(row.EncodedArgs, &job.Args); err != nil {
			return fmt.Errorf("queue: decode the args of kind %q: %w", kind, err)
		}
		return w.Work(ctx, job)
	}
}

func (ws *Workers) lookup(kind string) func(context.Context, *JobRow) error {
	if ws == nil {
		return nil
	}
	ws.mu.RLock()
	defer ws.mu.RUnlock()
	return ws.kinds[kind]
}

func (ws *Workers) empty() bool {
	if ws == nil {
		return true
	}
	ws.mu.RLock()
	defer ws.mu.RUnlock()
	return len(ws.kinds) == 0
}
