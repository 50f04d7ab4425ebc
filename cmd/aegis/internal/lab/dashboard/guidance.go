package dashboard

import (
	"fmt"
	"strings"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/schedule"
)

// guidance is what to watch in a run the page started, from its strategy,
// its fence and its faults: the same kind of words a preset's Watch says.
func guidance(c lab.Config) string {
	st, ok := lab.LookupStrategy(c.Strategy)
	if !ok {
		return ""
	}
	fenced := c.Fence && st.Fenceable()
	var parts []string
	switch {
	case st.Name == "none":
		parts = append(parts, "every node runs every tick: each tick's column turns red (applied once per node), and each job's ledger line falls below its commits (lost updates)")
	case st.Token == lab.VersionToken:
		parts = append(parts, "each node claims a tick by moving the job's version with a compare-and-set, by its own clock: with clocks that agree one node claims each tick; skew a clock and a node claims a tick already run (red), while the version check keeps the ledger")
	case st.Mode == schedule.ModeRunKey:
		parts = append(parts, "each tick is one run row: the first insert runs it; pause or cut off the runner past the TTL and a reaper retries the tick with a greater token (attempt 2)")
	case st.Mode == schedule.ModeLeader:
		parts = append(parts, "the elected node enqueues each tick; workers compete for the runs; pause a worker past the TTL and the queue hands its run to another worker with a greater token")
	case !st.Fenceable():
		parts = append(parts, "one node holds each job's lock at a time, but the lock carries no token: pause the holder past the TTL (or cut it off) and another node enters while it still works; both write")
	default:
		parts = append(parts, "one node holds each job's lease per tick, its token (t) growing tick by tick; pause the holder past the TTL and the lease expires on the server (the expiry mark on its lane) and another node is granted a greater token")
	}
	if st.Fenceable() {
		if fenced {
			parts = append(parts, "the fence refuses the late holder's write: its mark turns amber, labelled with its token against the one the store holds (t10 < t11), and nothing is applied twice")
		} else {
			parts = append(parts, "unfenced, the late holder's write is applied: a red tick (applied twice) or a gap between the ledger line and the commits (a lost update)")
		}
	}
	for _, ch := range c.Chaos {
		if w := watchFault(st, fenced, ch); w != "" {
			parts = append(parts, w)
		}
	}
	if c.Standby > 0 {
		parts = append(parts, fmt.Sprintf("the last %d node(s) run on a hot standby: their scheduler sees the store is not the primary and runs nothing until it is promoted", c.Standby))
	}
	s := strings.Join(parts, "; ")
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// watchFault is what to watch for one fault of a run.
func watchFault(st lab.Strategy, fenced bool, ch lab.Chaos) string {
	switch ch.Kind {
	case lab.Pause:
		return fmt.Sprintf("at %s %s is paused (SIGSTOP) for %s: the purple band on its lane", ch.At, ch.Target, ch.For)
	case lab.Kill:
		if _, server := ch.ServerKind(); server {
			return fmt.Sprintf("at %s a %s member is killed: in-flight grants wait for a new leader, nothing is granted twice", ch.At, ch.Target)
		}
		return fmt.Sprintf("at %s %s is killed (SIGKILL): its open section ends grey, without a commit, and the lab restarts it", ch.At, ch.Target)
	case lab.Partition:
		return fmt.Sprintf("at %s %s is cut from its servers for %s: the teal band; it works on, unaware", ch.At, ch.Target, ch.For)
	case lab.Skew:
		return fmt.Sprintf("%s's clock is set %s off: a node whose clock is ahead fires early", ch.Target, ch.Offset)
	case lab.Failover:
		return fmt.Sprintf("at %s the Redis primary dies before it replicates the holder's grant; its replica, promoted, grants the key again, with a token already used", ch.At)
	case lab.Restart:
		return fmt.Sprintf("at %s Redis restarts empty: its token counters start again, so the next grants carry tokens the fence has seen", ch.At)
	case lab.Crash:
		return fmt.Sprintf("at %s PostgreSQL crashes and recovers: every connection drops, writes in flight retry, nothing committed is lost", ch.At)
	case lab.Promote:
		return fmt.Sprintf("at %s the primary stops and its standby, with every commit replayed, is promoted (the orange line, standby promoted): every node's store moves to it, the second region runs ticks from then on, and no tick that committed runs again", ch.At)
	case lab.Edit:
		return fmt.Sprintf("at %s the catalog's %s changes (%s): its ticks follow from its next fire time", ch.At, ch.Target, ch.Spec)
	case lab.Latency:
		return fmt.Sprintf("%s answers %s late", ch.Target, ch.Offset)
	}
	return ""
}
