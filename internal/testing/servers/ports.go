package servers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

var errPortInUse = errors.New("port in use")

// Free ports are picked in [pickLo, pickHi): above the shared servers'
// fixed ports (12181–16384) and below Linux's default ephemeral range
// (32768–60999), so that no outgoing connection is given the port between
// our pick and the server's bind.
const (
	pickLo = 20000
	pickHi = 32768
)

// FreePorts returns n distinct loopback TCP ports that are free now. A port
// can still be taken before the server binds it; the Start functions retry
// on new ports when that happens.
func FreePorts(n int) ([]int, error) {
	lo, hi := pickLo, pickHi
	if elo, ehi, ok := ephemeralRange(); ok && elo < hi && ehi >= lo {
		// An unusual ephemeral range overlaps ours: pick below it, or above.
		if elo-lo >= 2000 {
			hi = elo
		} else {
			lo, hi = ehi+1, 65536
		}
	}
	seen := map[int]bool{}
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 2000 {
			return nil, fmt.Errorf("servers: no free loopback port found in %d–%d", lo, hi-1)
		}
		port := lo + rand.IntN(hi-lo)
		if seen[port] {
			continue
		}
		seen[port] = true
		if checkPortFree(port) == nil {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// checkPortFree returns an error wrapping errPortInUse when something
// listens on 127.0.0.1:port.
func checkPortFree(port int) error {
	ln, err := net.Listen("tcp", hostPort(port))
	if err != nil {
		return fmt.Errorf("127.0.0.1:%d: %w (another process listens there: stop it, or choose another port)", port, errPortInUse)
	}
	return ln.Close()
}

func ephemeralRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	return lo, hi, err1 == nil && err2 == nil
}

// pickPorts returns given when it is set (its length must be n), or n free
// ports.
func pickPorts(field string, given []int, n int) ([]int, bool, error) {
	if len(given) > 0 {
		if len(given) != n {
			return nil, false, fmt.Errorf("servers: %s has %d ports, want %d (one per member) or none", field, len(given), n)
		}
		return given, false, nil
	}
	ports, err := FreePorts(n)
	return ports, true, err
}
