package rowlease

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aegislab/aegis"
)

// MaxHolderLen is the longest holder name, in bytes: room for a host name
// (at most 253) and a pid, or a name the user gives.
const MaxHolderLen = 255

// MaxHistory is the most grants per key a grant history keeps. Each grant
// deletes what falls off the end, so the table's size is keys × History.
const MaxHistory = 1000

// DefaultHolder is "host/pid": which process took a key, enough to find it
// on a dashboard or in ps. A host whose name cannot be read is "unknown".
// It always passes CheckHolder: a control character or invalid UTF-8 in
// the host name becomes '?', and a name too long is cut, so that a Locker
// with the default config never fails on its host's name.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return defaultHolder(host, os.Getpid())
}

func defaultHolder(host string, pid int) string {
	suffix := "/" + strconv.Itoa(pid)
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(host, "?") {
		if unicode.IsControl(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r)+len(suffix) > MaxHolderLen {
			break
		}
		b.WriteRune(r)
	}
	return b.String() + suffix
}

// CheckHolder checks a holder name: at most MaxHolderLen bytes of UTF-8,
// no control character (a name is printed on pages and in logs, where a
// newline or an escape would forge lines). field names the config field in
// the error, which wraps aegis.ErrInvalid.
func CheckHolder(field, name string) error {
	switch {
	case len(name) > MaxHolderLen:
		return fmt.Errorf("%s: %w: %d bytes, at most %d are allowed", field, aegis.ErrInvalid, len(name), MaxHolderLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s: %w: %q is not valid UTF-8", field, aegis.ErrInvalid, name)
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s: %w: %q has a control character at offset %d", field, aegis.ErrInvalid, name, i)
		}
	}
	return nil
}

// CheckHistory checks a grant history length: 0 (off) to MaxHistory.
func CheckHistory(field string, n int) error {
	if n < 0 || n > MaxHistory {
		return fmt.Errorf("%s: %w: %d is not between 0 (off) and %d", field, aegis.ErrInvalid, n, MaxHistory)
	}
	return nil
}
