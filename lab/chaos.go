package lab

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aegislab/aegis/internal/servers"
)

// ChaosKind names a kind of fault.
type ChaosKind string

// The kinds of fault, with their spec forms (DESIGN.md section 8).
const (
	Pause     ChaosKind = "pause"     // pause:TARGET@AT+FOR — SIGSTOP, SIGCONT after FOR
	Kill      ChaosKind = "kill"      // kill:TARGET@AT — SIGKILL, then a restart
	Failover  ChaosKind = "failover"  // failover:redis@AT — primary lost before replication, replica promoted
	Restart   ChaosKind = "restart"   // restart:redis@AT — restarted without persistence
	Partition ChaosKind = "partition" // partition:TARGET@AT+FOR — the node's connections dropped
	Skew      ChaosKind = "skew"      // skew:TARGET=±D — the node's clock offset
	Latency   ChaosKind = "latency"   // latency:SERVER=D — every round trip to SERVER takes D longer
)

// Holder is the chaos target that means "whoever is in the critical section
// at that moment, or the next node to enter it".
const Holder = "holder"

// Chaos is one fault of a run. Parse it from its spec with [ParseChaos].
type Chaos struct {
	Kind ChaosKind
	// Target is "holder" or "nodeN" for pause, kill, partition and skew;
	// "redis" for failover and restart; a server kind (postgres, redis,
	// etcd, zookeeper) for latency.
	Target string
	// At is when the fault happens, from the start of the run's first
	// tick. Zero for skew and latency, which last the whole run.
	At time.Duration
	// For is how long a pause or a partition lasts.
	For time.Duration
	// Offset is the clock offset of skew (positive: the node's clock is
	// ahead) or the added delay of latency.
	Offset time.Duration
}

// Node returns N for a target "nodeN", and 0 for any other target.
func (c Chaos) Node() int {
	n, ok := parseNode(c.Target)
	if !ok {
		return 0
	}
	return n
}

// String returns the chaos in its canonical spec form, which ParseChaos
// accepts.
func (c Chaos) String() string {
	switch c.Kind {
	case Pause, Partition:
		return fmt.Sprintf("%s:%s@%s+%s", c.Kind, c.Target, c.At, c.For)
	case Kill, Failover, Restart:
		return fmt.Sprintf("%s:%s@%s", c.Kind, c.Target, c.At)
	case Skew:
		sign := "+"
		if c.Offset < 0 {
			sign = ""
		}
		return fmt.Sprintf("%s:%s=%s%s", c.Kind, c.Target, sign, c.Offset)
	case Latency:
		return fmt.Sprintf("%s:%s=%s", c.Kind, c.Target, c.Offset)
	}
	return string(c.Kind) + ":" + c.Target
}

// maxChaosDuration bounds every duration in a spec: longer is a typo.
const maxChaosDuration = 24 * time.Hour

// ParseChaos parses a chaos spec:
//
//	pause:TARGET@AT+FOR   kill:TARGET@AT        failover:redis@AT
//	restart:redis@AT      partition:TARGET@AT+FOR
//	skew:TARGET=±D        latency:SERVER=D
//
// TARGET is "holder" or "nodeN" (N from 1); skew needs "nodeN". SERVER is
// postgres, redis, etcd or zookeeper. AT, FOR and D are Go durations
// ("3s", "1.5s", "250ms"). The error quotes the spec and says what is
// wrong.
func ParseChaos(spec string) (Chaos, error) {
	bad := func(format string, args ...any) (Chaos, error) {
		return Chaos{}, invalid("chaos %q: %s", spec, fmt.Sprintf(format, args...))
	}
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return bad("want KIND:TARGET…, such as pause:holder@3s+2s")
	}
	c := Chaos{Kind: ChaosKind(kind)}
	switch c.Kind {
	case Pause, Partition:
		target, when, ok := strings.Cut(rest, "@")
		if !ok {
			return bad("missing @AT (want %s:TARGET@AT+FOR)", kind)
		}
		at, dur, ok := strings.Cut(when, "+")
		if !ok {
			return bad("missing +FOR (want %s:TARGET@AT+FOR)", kind)
		}
		if err := c.setTarget(target, true); err != nil {
			return bad("%v", err)
		}
		var err error
		if c.At, err = duration("AT", at, false); err != nil {
			return bad("%v", err)
		}
		if c.For, err = duration("FOR", dur, true); err != nil {
			return bad("%v", err)
		}
	case Kill, Failover, Restart:
		target, at, ok := strings.Cut(rest, "@")
		if !ok {
			form := "kill:TARGET@AT"
			if c.Kind != Kill {
				form = kind + ":redis@AT"
			}
			return bad("missing @AT (want %s)", form)
		}
		if c.Kind == Kill {
			if err := c.setTarget(target, true); err != nil {
				return bad("%v", err)
			}
		} else if target != "redis" {
			return bad("target %q: only redis can be %s (want %s:redis@AT)", target, map[ChaosKind]string{Failover: "failed over", Restart: "restarted"}[c.Kind], kind)
		} else {
			c.Target = target
		}
		var err error
		if c.At, err = duration("AT", at, false); err != nil {
			return bad("%v", err)
		}
	case Skew:
		target, d, ok := strings.Cut(rest, "=")
		if !ok {
			return bad("missing =±D (want skew:nodeN=+500ms)")
		}
		if err := c.setTarget(target, false); err != nil {
			return bad("%v", err)
		}
		body, neg := strings.CutPrefix(d, "-")
		if !neg {
			body, _ = strings.CutPrefix(d, "+")
		}
		if strings.HasPrefix(body, "+") || strings.HasPrefix(body, "-") {
			return bad("D %q has more than one sign", d)
		}
		off, err := duration("D", body, true)
		if err != nil {
			return bad("%v", err)
		}
		if neg {
			off = -off
		}
		c.Offset = off
	case Latency:
		server, d, ok := strings.Cut(rest, "=")
		if !ok {
			return bad("missing =D (want latency:SERVER=D, such as latency:redis=20ms)")
		}
		kind, err := servers.ParseKind(server)
		if err != nil {
			return bad("server %q: want postgres, redis, etcd or zookeeper", server)
		}
		c.Target = string(kind)
		if c.Offset, err = duration("D", d, true); err != nil {
			return bad("%v", err)
		}
	default:
		return bad("unknown kind %q (want pause, kill, failover, restart, partition, skew or latency)", kind)
	}
	return c, nil
}

// setTarget sets a node target: "holder" (when holderOK) or "nodeN".
func (c *Chaos) setTarget(target string, holderOK bool) error {
	if target == Holder {
		if !holderOK {
			return fmt.Errorf("target %q: %s needs a node (nodeN), the holder changes during a run", target, c.Kind)
		}
		c.Target = target
		return nil
	}
	if _, ok := parseNode(target); !ok {
		if holderOK {
			return fmt.Errorf("target %q: want holder or nodeN (N from 1)", target)
		}
		return fmt.Errorf("target %q: want nodeN (N from 1)", target)
	}
	c.Target = target
	return nil
}

func parseNode(target string) (int, bool) {
	digits, ok := strings.CutPrefix(target, "node")
	if !ok || digits == "" || digits[0] == '0' || len(digits) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// duration parses a non-negative Go duration (positive when positive is
// set) of at most a day.
func duration(name, s string, positive bool) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("%s is empty (want a duration such as 3s)", name)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a duration (want one such as 3s or 250ms)", name, s)
	}
	switch {
	case d < 0:
		return 0, fmt.Errorf("%s %s is negative", name, s)
	case positive && d == 0:
		return 0, fmt.Errorf("%s %s must be positive", name, s)
	case d > maxChaosDuration:
		return 0, fmt.Errorf("%s %s is longer than %s", name, s, maxChaosDuration)
	}
	return d, nil
}
