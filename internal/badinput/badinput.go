// Package badinput builds the errors of a caller's mistake (a nil argument,
// a bad Config field, a flag, a chaos spec), in every package above the
// root: they match aegis.ErrInvalid without repeating its text. The root
// itself wraps aegis.ErrInvalid with fmt.Errorf's %w.
package badinput

import (
	"fmt"

	"github.com/aegislab/aegis"
)

// Errorf formats an error that matches aegis.ErrInvalid, and whatever the
// format's %w verbs wrap. Its message is the formatted text alone, which
// names the argument, field or flag that is wrong.
func Errorf(format string, args ...any) error {
	return invalidError{fmt.Errorf(format, args...)}
}

type invalidError struct{ error }

func (e invalidError) Unwrap() []error { return []error{aegis.ErrInvalid, e.error} }
