package rowlease

import (
	"fmt"
	"os"
	"strconv"
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
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
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
