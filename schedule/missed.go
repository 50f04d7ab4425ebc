package schedule

// MissCause says why a tick was missed: no replica started it by its
// starting deadline. It is a missed tick's cause in the store and the
// cause label of aegis_schedule_missed_total.
type MissCause string

const (
	// CauseHeld: the replicas that had the tick skipped it because the
	// job's key was held (lease mode: the lease; overlap forbid: a run of
	// an earlier tick still going).
	CauseHeld MissCause = "held"
	// CauseUnbound: no replica bound the schedule (none has its handler,
	// or a code job of the same name hides it).
	CauseUnbound MissCause = "unbound"
	// CausePaused: the catalog schedule was paused.
	CausePaused MissCause = "paused"
	// CauseMisfire: the replica that had the tick was late past its
	// starting deadline, and the misfire policy dropped it.
	CauseMisfire MissCause = "misfire"
	// CauseStore: the store did not answer the claim before the starting
	// deadline, or was a read-only standby.
	CauseStore MissCause = "store"
	// CauseDown: no replica was running at the tick (recorded by the first
	// replica to start after it).
	CauseDown MissCause = "down"
)
