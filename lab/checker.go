package lab

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker: the protected resource's history, one operation per
// critical section that read the balance, checked for linearizability
// against the specification of a fenced counter:
//
//   - a committed attempt read the value the counter had and wrote it + 1,
//     atomically (nothing else committed between its read and its write);
//   - with a lease token and the fence, a committed attempt's token was at
//     least the greatest token presented so far, and a refused attempt's
//     token was below it;
//   - an attempt that ended without a commit or a refusal (a killed node,
//     an error) may or may not have presented its token.
//
// Two holders that both read 5 and both commit 6 cannot be ordered so
// that each read the value before it: a violation. A paused holder whose
// write the fence refused, after a greater token was presented, is fine.

// Outcome is how an attempt ended, for the checker.
type Outcome string

const (
	Committed Outcome = "committed"
	Refused   Outcome = "refused"
	Unknown   Outcome = "unknown" // no commit and no refusal
)

// Attempt is one critical section in the checker's history.
type Attempt struct {
	ID    string
	Node  int
	Tick  int
	Token int64
	// Read is the balance the attempt read; -1 when it was refused before
	// reading.
	Read    int64
	Outcome Outcome
	// Call is when the attempt began (before its first statement);
	// Return when its outcome was known (math.MaxInt64 if never).
	Call, Return int64
	client       int
}

// counter is the model's state.
type counter struct {
	Value int64
	Fence int64 // the greatest token presented
}

// checkerModel returns the model; fenced says the tokens are lease tokens
// checked by the fence.
func checkerModel(fenced bool) porcupine.Model {
	nd := porcupine.NondeterministicModel{
		Init: func() []any { return []any{counter{}} },
		Step: func(state, input, _ any) []any {
			s, a := state.(counter), input.(Attempt)
			switch a.Outcome {
			case Committed:
				if a.Read != s.Value || (fenced && a.Token < s.Fence) {
					return nil
				}
				next := counter{Value: s.Value + 1, Fence: s.Fence}
				if fenced {
					next.Fence = a.Token
				}
				return []any{next}
			case Refused:
				if fenced && a.Token >= s.Fence {
					return nil // refused, yet no greater token was presented
				}
				return []any{s}
			default:
				if fenced && a.Token > s.Fence {
					return []any{s, counter{Value: s.Value, Fence: a.Token}}
				}
				return []any{s}
			}
		},
		Equal: func(a, b any) bool { return a.(counter) == b.(counter) },
		DescribeOperation: func(input, _ any) string {
			a := input.(Attempt)
			read := "refused before reading"
			if a.Read >= 0 {
				read = fmt.Sprintf("read %d", a.Read)
			}
			return fmt.Sprintf("tick %d node%d token %d: %s, %s", a.Tick, a.Node, a.Token, read, a.Outcome)
		},
		DescribeState: func(state any) string {
			s := state.(counter)
			if fenced {
				return fmt.Sprintf("balance %d, fence %d", s.Value, s.Fence)
			}
			return fmt.Sprintf("balance %d", s.Value)
		},
	}
	return nd.ToModel()
}

// Verdicts of the checker, as the report's checker field says them.
const (
	CheckOK        = "ok"
	CheckViolation = "violation"
	CheckUnknown   = "unknown"
)

// CheckHistory checks the attempts for linearizability within timeout.
// When html is not empty and the history is not linearizable, it writes
// porcupine's visualisation of the history there.
func CheckHistory(attempts []Attempt, fenced bool, timeout time.Duration, html string) (string, error) {
	ops := make([]porcupine.Operation, 0, len(attempts))
	for _, a := range attempts {
		ret := a.Return
		if ret == 0 || ret < a.Call {
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: a.client, Input: a, Call: a.Call, Output: a.Outcome, Return: ret})
	}
	model := checkerModel(fenced)
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return CheckOK, nil
	case porcupine.Illegal:
		if html != "" {
			if err := porcupine.VisualizePath(model, info, html); err != nil {
				return CheckViolation, fmt.Errorf("write the visualisation: %w", err)
			}
		}
		return CheckViolation, nil
	}
	return CheckUnknown, nil
}
