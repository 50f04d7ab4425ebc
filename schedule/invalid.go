package schedule

import (
	"fmt"

	"github.com/aegislab/aegis"
)

// invalidError is a caller's mistake (a nil argument, a bad Config field):
// it matches aegis.ErrInvalid, and whatever it wraps, without repeating
// ErrInvalid's text, as package queue's input errors do.
type invalidError struct{ error }

func (e invalidError) Unwrap() []error { return []error{aegis.ErrInvalid, e.error} }

// invalid formats an error that matches aegis.ErrInvalid; the message names
// the argument or field that is wrong.
func invalid(format string, args ...any) error { return invalidError{fmt.Errorf(format, args...)} }
