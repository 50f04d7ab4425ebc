package aegis

import (
	"errors"

	"github.com/aegislab/aegis/driver"
)

var (
	// ErrHeld is returned by TryAcquire when another owner's lease on the key
	// is live.
	ErrHeld = errors.New("aegis: lease held by another owner")
	// ErrLost is returned by Renew and Release when the lease expired or
	// another owner took the key. Work under the lease must stop.
	ErrLost = errors.New("aegis: lease lost")
	// ErrStale is returned by a fenced write whose token is lower than one
	// the store already accepted. The caller rolls back and stops.
	ErrStale = errors.New("aegis: stale fencing token")
	// ErrInvalid is wrapped by errors for bad input: an empty, over-long or
	// malformed key, a TTL out of range, a nil lease. It is
	// driver.ErrInvalid, which the key and TTL checks wrap.
	ErrInvalid = driver.ErrInvalid
)
