package schedule

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/actor"
)

// MaxNameLen is the longest job name, in bytes: the name is a lease key
// (with a suffix per tick for OverlapAllow in lease mode) and a run key.
const MaxNameLen = 150

// Job is one scheduled job. Exactly one of Cron, Every and Schedule is set.
type Job struct {
	// Name identifies the job across replicas: the run key's first half,
	// the lease key (ShedLock's @SchedulerLock name). Required; at most
	// MaxNameLen bytes of UTF-8 without NUL.
	Name string
	// Cron is a cron spec (see Cron for the syntax and the daylight saving
	// rules), such as "TZ=Europe/Berlin 0 30 2 * * *".
	Cron string
	// Every is a fixed interval aligned to the Unix epoch (see Interval).
	Every time.Duration
	// Schedule is any other Schedule.
	Schedule Schedule
	// Run is the job. Its context carries the run (RunFrom, TokenFrom) and
	// is cancelled when the run's lease or run row is lost (in leader mode:
	// the queue job's lease), when the run is replaced (OverlapReplace), or
	// when the scheduler (the queue client) stops. A returned error (or a
	// panic) is recorded as the run's outcome; it is not retried. Required.
	Run func(ctx context.Context) error

	// LockAtMostFor is the lease TTL (lease mode) or the run row's TTL
	// (run-key mode): how long a crashed node blocks the job. (Leader mode
	// does not use it: a run's lease is the workers' queue.Config.Lease.) With
	// keep-alive (the default) the lease is renewed every third of it while
	// the job runs; without, a run longer than this loses its exclusion and
	// its context is cancelled. Default 30s; at least 10ms.
	LockAtMostFor time.Duration
	// LockAtLeastFor keeps the lease after a run that ended early, until
	// this long after it started, so that a replica whose clock is behind
	// does not run the same tick again (lease mode only: a run key already
	// prevents that). Default 0; at most LockAtMostFor.
	LockAtLeastFor time.Duration
	// DisableKeepAlive stops renewing the lease (or run row) while the job
	// runs: ShedLock without KeepAliveLockProvider. Default false.
	DisableKeepAlive bool

	// StartingDeadline is how late a tick may start and still count as on
	// time; older ticks are misfires, handled by Misfire. Default: the
	// smaller of 10s and half the time to the next tick.
	StartingDeadline time.Duration
	// Misfire says what to do with ticks that missed their starting
	// deadline (the scheduler was down, paused or behind). Default
	// MisfireFireOnce.
	Misfire Misfire
	// CatchUpMax is how many misfired ticks MisfireCatchUp runs at most
	// (the most recent ones, oldest first). Default 1; at most 1000.
	CatchUpMax int
	// Overlap says what to do when a tick comes while a run of the job is
	// still going. Default OverlapForbid.
	Overlap Overlap
	// MaxAttempts is how many times run-key mode runs a tick whose runner
	// crashed (its run row expired): the reaper retries it with a greater
	// token until then, and marks it abandoned after. In leader mode it is
	// the queue job's MaxAttempts (the queue's reaper discards the run
	// after it). Default 3; at most 1000.
	MaxAttempts int
}

// Misfire is a misfire policy.
type Misfire int

const (
	// MisfireFireOnce runs one run for all the misfired ticks, keyed by the
	// most recent of them, unless an on-time tick runs anyway.
	MisfireFireOnce Misfire = iota
	// MisfireSkip drops misfired ticks.
	MisfireSkip
	// MisfireCatchUp runs the most recent CatchUpMax misfired ticks, oldest
	// first, each under its own run key.
	MisfireCatchUp
)

func (m Misfire) String() string {
	switch m {
	case MisfireFireOnce:
		return "fire-once"
	case MisfireSkip:
		return "skip"
	case MisfireCatchUp:
		return "catch-up"
	}
	return fmt.Sprintf("Misfire(%d)", int(m))
}

// Overlap is an overlap policy: what a tick does while an earlier run of
// the same job is still going.
type Overlap int

const (
	// OverlapForbid skips the tick. Run-key mode records it as skipped;
	// lease mode finds the job's lease held; leader mode keeps one live
	// queue job per job (its unique key is the job's name) and records a
	// tick that finds one queued or running as skipped.
	OverlapForbid Overlap = iota
	// OverlapReplace cancels the running predecessor and runs the tick with
	// a greater token, so the predecessor's late writes are fenced. In
	// run-key mode the predecessor may be on any node (it learns at its
	// next heartbeat); in lease mode only a predecessor on this node can be
	// replaced, and one elsewhere makes the tick a skip. Not supported in
	// leader mode.
	OverlapReplace
	// OverlapAllow runs the tick alongside its predecessor. In lease mode
	// each tick takes a lease of its own (NAME@FIRE-TIME); in leader mode
	// each tick's queue job has a unique key of its own (NAME@FIRE-TIME).
	OverlapAllow
)

func (o Overlap) String() string {
	switch o {
	case OverlapForbid:
		return "forbid"
	case OverlapReplace:
		return "replace"
	case OverlapAllow:
		return "allow"
	}
	return fmt.Sprintf("Overlap(%d)", int(o))
}

// validate fills defaults on a copy of j and checks it, with the rules of
// c's mode (nil: none, as in lease mode, the most permissive). Errors name
// the field.
func (j Job) validate(c claimer) (Job, Schedule, error) {
	if err := driver.CheckKey(j.Name); err != nil {
		return j, nil, invalid("Job.Name: %w", err)
	}
	if len(j.Name) > MaxNameLen {
		return j, nil, invalid("Job.Name is %d bytes, at most %d are allowed", len(j.Name), MaxNameLen)
	}
	s, err := j.parseSchedule()
	if err != nil {
		return j, nil, err
	}
	if j.Run == nil {
		return j, nil, invalid("Job.Run is nil")
	}
	j.LockAtMostFor = cmp.Or(j.LockAtMostFor, 30*time.Second)
	j.CatchUpMax = cmp.Or(j.CatchUpMax, 1)
	j.MaxAttempts = cmp.Or(j.MaxAttempts, 3)
	switch {
	case j.LockAtMostFor < 0:
		return j, nil, invalid("Job.LockAtMostFor %s is not positive", j.LockAtMostFor)
	case j.LockAtMostFor < 10*time.Millisecond:
		return j, nil, invalid("Job.LockAtMostFor %s is shorter than 10ms", j.LockAtMostFor)
	case j.LockAtMostFor > aegis.MaxTTL:
		return j, nil, invalid("Job.LockAtMostFor %s is longer than %s", j.LockAtMostFor, aegis.MaxTTL)
	case j.LockAtLeastFor < 0:
		return j, nil, invalid("Job.LockAtLeastFor %s is negative", j.LockAtLeastFor)
	case j.LockAtLeastFor > j.LockAtMostFor:
		return j, nil, invalid("Job.LockAtLeastFor %s is longer than Job.LockAtMostFor %s", j.LockAtLeastFor, j.LockAtMostFor)
	}
	if c != nil {
		if err := c.check(j); err != nil {
			return j, nil, err
		}
	}
	switch {
	case j.StartingDeadline < 0:
		return j, nil, invalid("Job.StartingDeadline %s is negative", j.StartingDeadline)
	case j.Misfire < MisfireFireOnce || j.Misfire > MisfireCatchUp:
		return j, nil, invalid("Job.Misfire %d is not a misfire policy", int(j.Misfire))
	case j.CatchUpMax < 1 || j.CatchUpMax > 1000:
		return j, nil, invalid("Job.CatchUpMax %d is not in 1..1000", j.CatchUpMax)
	case j.Overlap < OverlapForbid || j.Overlap > OverlapAllow:
		return j, nil, invalid("Job.Overlap %d is not an overlap policy", int(j.Overlap))
	case j.MaxAttempts < 1 || j.MaxAttempts > 1000:
		return j, nil, invalid("Job.MaxAttempts %d is not in 1..1000", j.MaxAttempts)
	}
	return j, s, nil
}

// parseSchedule is the job's schedule: its Cron, Every or Schedule, exactly
// one of them, checked.
func (j Job) parseSchedule() (Schedule, error) {
	var s Schedule
	set := 0
	if j.Cron != "" {
		set++
		var err error
		if s, err = ParseCron(j.Cron); err != nil {
			return nil, invalid("Job.Cron: %w", err)
		}
	}
	if j.Every != 0 {
		set++
		iv := Every(j.Every)
		if err := iv.validate(); err != nil {
			return nil, invalid("Job.Every: %w", err)
		}
		s = iv
	}
	if j.Schedule != nil {
		set++
		s = j.Schedule
		// The schedules of this package can be built wrong by hand; one that
		// never fires (Next returns zero) would stop the job silently.
		var err error
		switch v := s.(type) {
		case Interval:
			err = v.validate()
		case *Interval:
			if v == nil {
				err = fmt.Errorf("a nil *Interval")
			} else {
				err = v.validate()
			}
		case *Cron:
			if v == nil || v.loc == nil {
				err = fmt.Errorf("a Cron that ParseCron did not return")
			}
		}
		if err != nil {
			return nil, invalid("Job.Schedule: %w", err)
		}
	}
	if set != 1 {
		return nil, invalid("exactly one of Job.Cron, Job.Every and Job.Schedule must be set, got %d", set)
	}
	return s, nil
}

// leaseOnly refuses the options only lease mode has: the check of run-key
// and leader mode.
func (j Job) leaseOnly() error {
	if j.LockAtLeastFor > 0 {
		return invalid("Job.LockAtLeastFor is for lease mode (Config.Locker); a run key already stops a second run of a tick")
	}
	return nil
}

// Run describes one run of a job, as its context carries it.
type Run struct {
	Job       string
	Namespace string    // the scheduler's namespace
	Fire      time.Time // the scheduled fire time: with Job (and Namespace), the run key
	Node      string    // the node running it
	// Token fences the run's writes: in run-key mode it orders runs by fire
	// time, then attempt (a later tick's token is always greater); in lease
	// mode it is the lease's token; in leader mode it is the queue job's
	// token offset by the fire time (fire time in ms × 10⁶ + the job's
	// token), so it orders runs by fire time, then claim, as in run-key
	// mode: a run reclaimed from a paused worker has a greater token than
	// the paused one, and a later tick's run a greater one still.
	Token   aegis.Token
	Attempt int // 1, then 2, ... when the reaper retries a crashed run
	// Args and Version are a catalog schedule's, as its row had them when
	// the tick was claimed (nil and 0 for a job added in code).
	Args    json.RawMessage
	Version int64
}

type (
	runKey   struct{}
	leaseKey struct{}
)

// withRun is a handler's context: it carries its run (RunFrom), and who
// runs it for the fence (internal/actor), so that a write the fence
// refuses inside the handler names its node, schedule, tick and attempt.
func withRun(ctx context.Context, run Run) context.Context {
	ctx = actor.With(ctx, actor.Writer{Node: run.Node, Schedule: run.Job, Fire: run.Fire, Attempt: run.Attempt, Token: int64(run.Token)})
	return context.WithValue(ctx, runKey{}, run)
}

// RunFrom returns the run that ctx belongs to, when ctx is (derived from)
// a job's context.
func RunFrom(ctx context.Context) (Run, bool) {
	r, ok := ctx.Value(runKey{}).(Run)
	return r, ok
}

// TokenFrom returns the fencing token of the run that ctx belongs to: send
// it with every write of the job, through the fence. A run's token is
// always positive. Outside a run (ctx is not, and does not derive from, a
// job's context) it returns 0 and false: check ok. Code that drops ok
// (token, _ := TokenFrom(ctx)) and writes outside a run sends token 0,
// which is no run's token, and which the fence refuses (aegis.ErrInvalid)
// rather than accepting as a first writer.
func TokenFrom(ctx context.Context) (aegis.Token, bool) {
	r, ok := RunFrom(ctx)
	return r.Token, ok
}

// LeaseFrom returns, in lease mode, the lease the run holds (its key,
// token, owner and TTL as granted): what fence.CheckLease takes, so that a
// holder granted a token equal to another's (a Redis failover that sent
// the counter back) cannot commit beside it. Outside a lease-mode run it
// returns false.
func LeaseFrom(ctx context.Context) (aegis.Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(aegis.Lease)
	return l, ok
}
