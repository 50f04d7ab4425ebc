// Package actor carries, in a context, who is writing: the scheduler sets
// it on a handler's context (the node running it, the schedule, the fire
// time, the attempt and its token), and the fence reads it to name the writer of a
// write it refused. It is a carrier only: nothing here writes or checks.
package actor

import (
	"context"
	"time"
)

// Writer is who runs the code a context belongs to.
type Writer struct {
	Node     string    // the node (replica) running it
	Schedule string    // the schedule whose tick it runs ("": none)
	Fire     time.Time // the tick's fire time (zero: none)
	Attempt  int       // the tick's attempt, 1 and up (0: none)
	Token    int64     // the run's fencing token (0: none), for a refusal that names none (fence.Exec)
}

type key struct{}

// With returns ctx carrying w.
func With(ctx context.Context, w Writer) context.Context {
	return context.WithValue(ctx, key{}, w)
}

// From returns the Writer ctx carries, when it carries one.
func From(ctx context.Context) (Writer, bool) {
	w, ok := ctx.Value(key{}).(Writer)
	return w, ok
}
