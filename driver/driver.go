// Package driver holds what an implementation of aegis.Locker applies on
// every call, as database/sql/driver holds what a database/sql driver
// implements: the key and TTL rules every backend shares, and the local
// deadline of a grant. A user of the aegis package does not need it; a
// backend's author does.
//
// It imports nothing of the module, so that package aegis can use it too:
// aegis.ErrInvalid is ErrInvalid and aegis.MaxKeyLen and aegis.MaxTTL are
// the constants here, as os.ErrNotExist is fs.ErrNotExist.
package driver

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// ErrInvalid is wrapped by errors for bad input. It is aegis.ErrInvalid.
var ErrInvalid = errors.New("aegis: invalid argument")

// MaxKeyLen is the longest key, in bytes, that every backend accepts.
const MaxKeyLen = 200

// MaxTTL is the longest TTL every backend accepts unless it documents more.
const MaxTTL = 24 * time.Hour

// CheckKey reports whether key is a valid lease key: non-empty, at most
// MaxKeyLen bytes of UTF-8, no NUL byte. The error names what is wrong and
// wraps ErrInvalid.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key is empty", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, at most %d are allowed", ErrInvalid, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return fmt.Errorf("%w: key contains a NUL byte at offset %d", ErrInvalid, i)
		}
	}
	return nil
}

// CheckTTL reports whether ttl is a valid lease TTL: longer than its drift
// margin ([Drift], so the local deadline of a fresh grant is still ahead)
// and at most max (MaxTTL when max is zero). The error names the value and
// wraps ErrInvalid.
func CheckTTL(ttl, max time.Duration) error {
	if max <= 0 {
		max = MaxTTL
	}
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: ttl %s is not positive", ErrInvalid, ttl)
	case ttl <= Drift(ttl):
		return fmt.Errorf("%w: ttl %s is not longer than its clock-drift margin %s: the lease's local deadline would already have passed when it is granted", ErrInvalid, ttl, Drift(ttl))
	case ttl > max:
		return fmt.Errorf("%w: ttl %s is longer than the maximum %s", ErrInvalid, ttl, max)
	}
	return nil
}

// LocalDeadline is the conservative local deadline of a lease of ttl
// requested at start: start + ttl − drift, where drift allows 1% of the TTL
// plus 2ms for the rate difference between this clock and the store's (the
// margin Redlock uses). start must be read before the request is sent.
func LocalDeadline(start time.Time, ttl time.Duration) time.Time {
	return start.Add(ttl - Drift(ttl))
}

// Drift is the clock-drift margin LocalDeadline subtracts from ttl.
func Drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}
