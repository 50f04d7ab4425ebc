package lab

// Event is one thing that happened in a run: a node's step (from its
// output), a tick firing, a fault injected, or a harm the lab saw
// (a duplicate applied, a missed tick). Events stream live from
// runner.Run.Subscribe and end up in the report.
type Event struct {
	// T is when it happened, in seconds since the run's first tick fired
	// (negative before it). A node's events carry the node's real clock,
	// not its skewed one.
	T    float64 `json:"t"`
	Kind string  `json:"kind"`
	// Node is the node's number (from 1); 0 for the lab's own events.
	Node int `json:"node,omitempty"`
	// Job is the catalog schedule the event is about ("" for none).
	Job string `json:"job,omitempty"`
	// Tick is the tick's number on the run's grid (from 1); 0 when the
	// event is not about a tick.
	Tick int `json:"tick,omitempty"`
	// Token is the lease's or claim's fencing token; 0 when the strategy
	// has none.
	Token int64 `json:"token,omitempty"`
	// Attempt names one critical section (node.incarnation.sequence): its
	// enter, entered, executed or stale events share it.
	Attempt string `json:"attempt,omitempty"`
	// Value is the balance read (entered) or written (executed).
	Value *int64 `json:"value,omitempty"`
	// Held is, on a stale event, the token the store of record held when
	// it refused the attempt's token, read from the store in the refusing
	// transaction: greater than Token, or equal to it from another owner.
	// 0 when unknown.
	Held int64 `json:"held,omitempty"`
	// Until is, on acquired and renewed events, when the lease (lease
	// mode) or run row (pg-unique) expires on the store unless renewed
	// again, in seconds on the same clock as T: the grant's, claim's or
	// renewal's call start plus the TTL it asked for (schedule.Event's
	// Until). 0 where nothing expires on a store (none, pg-advisory) and
	// for queue, whose job lease is the queue's.
	Until float64 `json:"until,omitempty"`
	// Granted is, on acquired events, when the store granted the lease or
	// run row, in seconds on the same clock as T: the store's grant
	// history's time where it keeps one (pg-lease, sqlite), else the
	// grant's call start (Until minus the TTL). T is when the node said so,
	// which a pause between the grant and the node's handler makes later:
	// the grant is drawn and ordered at Granted. 0 where Until is.
	Granted float64 `json:"granted,omitempty"`
	// Detail says more, in words: an error, what a fault did.
	Detail string `json:"detail,omitempty"`
}

// The kinds of event. Node events first (see the node's protocol), then
// the lab's.
const (
	EventReady      = EvReady
	EventAcquired   = EvAcquired
	EventRenewed    = EvRenewed
	EventEnter      = EvEnter
	EventEntered    = EvEntered
	EventWriting    = EvWriting
	EventStale      = EvStale
	EventExecuted   = EvExecuted
	EventReleased   = EvReleased
	EventLost       = EvLost
	EventReclaim    = EvReclaim
	EventElected    = EvElected
	EventRefused    = EvRefused
	EventMisfired   = EvMisfired
	EventClaimed    = EvClaimed
	EventNotPrimary = EvNotPrimary
	EventError      = EvError
	EventAbandon    = EvAbandon
	EventFinished   = EvFinished

	EventTick      = "tick"      // a tick fired (the lab's clock)
	EventChaos     = "chaos"     // a fault began (Detail: the spec and what it did)
	EventHealed    = "healed"    // a fault ended: a node resumed, a partition healed
	EventStarted   = "started"   // a node process started (Detail: pid)
	EventExited    = "exited"    // a node process ended (Detail: how)
	EventDuplicate = "duplicate" // a tick's effect was committed more than once
	EventMissed    = "missed"    // a tick's window ended with no execution
)
