// Package outcome writes the outcome of a job or a run the way the queue
// and the scheduler must: an outcome that cannot be written becomes a
// second run (the reaper takes the work when the lease expires), so a
// write is never given up while the lease allows it.
//
//   - Its error text is made storable first (internal/errtext), and a
//     write the store still refuses for its data is sent again at once with
//     the text as ASCII.
//   - Any other failure is retried, with the same token (the write is
//     fenced, so a retry can only land once), until a deadline: the lease's
//     local deadline, after which the reaper may take the work.
//   - A try that failed after it may have been sent (its reply lost) may
//     have landed; the fence then refuses the next try, and the caller's
//     Landed reads the record back to tell whether the write that moved the
//     token on was this one.
//   - Every try after the first is logged, and the text of each later try
//     says which try it is and why the first failed, so the record says so
//     too.
package outcome

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aegislab/aegis/internal/backoff"
	"github.com/aegislab/aegis/internal/errtext"
)

// Write is one outcome's write.
type Write struct {
	// Text is the outcome's error text ("" for none); Do makes it storable.
	Text string
	// Deadline is the last moment a retry may start; the first try is
	// sent whenever Do is called.
	Deadline time.Time
	// Try sends the write once, with text, under ctx (bounded by
	// TryTimeout).
	Try func(ctx context.Context, text string) error
	// Refused reports an error of Try that says the fence refused the write
	// (the token moved on).
	Refused func(error) bool
	// Landed reports, after a try whose reply may have been lost, whether
	// that try landed: texts are every text a try sent. Nil: nothing can be
	// read back, and a refusal stands.
	Landed func(ctx context.Context, texts []string) (bool, error)
	// Stop, when it reports true, ends the retries early (the client
	// stops).
	Stop func() bool
	// Log logs a retry (a Warn).
	Log func(msg string, args ...any)
}

// TryTimeout bounds one try.
const TryTimeout = 10 * time.Second

// Retry spaces the tries of a write.
var Retry = backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}

// Result is how a write went.
type Result struct {
	Tries int
	// Text is the text that landed (or was last sent).
	Text string
	// Err is nil when the write landed; an error Refused accepts when the
	// fence refused it; else the last failure, after the deadline.
	Err error
}

// Do runs w.
func (w Write) Do() Result {
	base := errtext.Clean(w.Text)
	var (
		first error
		maybe bool // a failed try may have landed
		ascii bool
		texts []string
	)
	for try := 1; ; {
		text := base
		if first != nil && w.Text != "" {
			note := errtext.Of(first)
			if ascii {
				note = strconv.QuoteToASCII(note)
			}
			text = errtext.Clean(fmt.Sprintf("%s [recorded on try %d; try 1 failed: %s]", base, try, note))
		}
		texts = append(texts, text)
		// Each try has its time, whatever the deadline: a run that outlived
		// its lease still writes (or is refused) once.
		ctx, cancel := context.WithTimeout(context.Background(), TryTimeout)
		err := w.Try(ctx, text)
		cancel()
		switch {
		case err == nil:
			if first != nil {
				w.Log("outcome written after a failed try", "tries", try, "first_err", first)
			}
			return Result{Tries: try, Text: text}
		case w.Refused(err) && maybe && w.Landed != nil:
			ctx, cancel := context.WithTimeout(context.Background(), TryTimeout)
			ok, rerr := w.Landed(ctx, texts)
			cancel()
			if rerr == nil && ok {
				w.Log("outcome written: a try whose reply was lost had landed", "tries", try, "first_err", first)
				return Result{Tries: try, Text: text}
			}
			return Result{Tries: try, Text: text, Err: err}
		case w.Refused(err):
			return Result{Tries: try, Text: text, Err: err}
		case errtext.Refused(err) && w.Text != "" && !ascii:
			// Sent again at once: the store answered, so nothing landed.
			w.Log("the store refused the outcome's error text; writing it as ASCII", "err", err)
			base, ascii = errtext.ASCII(base, err), true
			continue
		}
		first = cmp.Or(first, err)
		maybe = maybe || MaybeLanded(err)
		wait := Retry.Delay(try - 1)
		if (w.Stop != nil && w.Stop()) || !time.Now().Add(wait).Before(w.Deadline) {
			return Result{Tries: try, Text: text, Err: fmt.Errorf("%w (tried %d times, until the lease ran out locally: the reaper takes the work when it expires)", err, try)}
		}
		w.Log("write the outcome; retrying", "try", try, "retry_in", wait, "err", err)
		time.Sleep(wait)
		try++
	}
}

// safeToRetry reports an error that says nothing was sent (pgconn's
// SafeToRetry, read through the interface its errors implement).
func safeToRetry(err error) bool {
	var s interface{ SafeToRetry() bool }
	return errors.As(err, &s) && s.SafeToRetry()
}

// MaybeLanded reports whether a failed statement may have landed: it may
// have been sent, and the error is not the server's answer to it.
func MaybeLanded(err error) bool {
	var pe interface{ SQLState() string }
	var se interface{ Code() int }
	return err != nil && !safeToRetry(err) && !errors.As(err, &pe) && !errors.As(err, &se)
}
