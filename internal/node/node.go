// Package node names the process a scheduler or an election candidate runs
// in.
package node

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/aegislab/aegis/internal/badinput"
)

// MaxLen is the longest node name, in bytes.
const MaxLen = 100

// Default returns "HOSTNAME-PID": unique among the processes of one host,
// readable in a run row or a leader record.
func Default() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	name := fmt.Sprintf("%s-%d", host, os.Getpid())
	if len(name) > MaxLen {
		name = name[len(name)-MaxLen:]
	}
	return name
}

// Check reports whether name is a usable node name: non-empty, at most
// MaxLen bytes of UTF-8 without NUL. field names the config field in the
// error, which quotes the name and wraps aegis.ErrInvalid (a bad name is
// the caller's mistake) without saying so in its text, so that a caller
// may wrap it with its own prefix.
func Check(field, name string) error {
	switch {
	case name == "":
		return invalid("%s is empty", field)
	case len(name) > MaxLen:
		return invalid("%s %.40q… is %d bytes, at most %d are allowed", field, name, len(name), MaxLen)
	case !utf8.ValidString(name):
		return invalid("%s %q is not valid UTF-8", field, name)
	case strings.IndexByte(name, 0) >= 0:
		return invalid("%s %q contains a NUL byte", field, name)
	}
	return nil
}

// invalid reads as its message and matches aegis.ErrInvalid.
func invalid(format string, args ...any) error { return badinput.Errorf(format, args...) }
