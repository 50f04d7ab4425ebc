package servers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"
	"time"
)

// startMembers starts (or, when detached, adopts) every member of a
// cluster, then waits until all are ready: members only become ready
// together, once a quorum is up. On failure it stops what it started.
// A detached cluster whose adopted members do not become healthy is
// restarted whole, once.
func startMembers(ctx context.Context, members []*Proc) error {
	defer lockAll(members)()
	err := startMembersOnce(ctx, members, true)
	if err != nil && slices.ContainsFunc(members, (*Proc).Reused) {
		if serr := stopMembers(members); serr != nil {
			return errors.Join(err, serr)
		}
		err = startMembersOnce(ctx, members, false)
	}
	return err
}

func startMembersOnce(ctx context.Context, members []*Proc, adopt bool) error {
	var launched []*Proc
	fail := func(err error) error {
		for _, m := range launched {
			m.killQuietly()
		}
		return err
	}
	for _, m := range members {
		if adopt && m.detach && m.adopt() {
			continue
		}
		if err := m.launch(ctx); err != nil {
			return fail(err)
		}
		launched = append(launched, m)
	}
	if err := waitMembers(ctx, members); err != nil {
		return fail(err)
	}
	return nil
}

// waitMembers waits until every member is ready, within the members' start
// timeout counted once for all.
func waitMembers(ctx context.Context, members []*Proc) error {
	deadline := time.Now().Add(members[0].timeout)
	for _, m := range members {
		if err := m.ready(ctx, time.Until(deadline)); err != nil {
			return err
		}
	}
	return nil
}

// stopMembers stops every member at once (a member waiting for a quorum
// that is going away would otherwise slow the others down).
func stopMembers(members []*Proc) error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { errs[i] = m.stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// healMembers resumes paused members, starts stopped ones, and waits until
// all are ready.
func healMembers(ctx context.Context, members []*Proc) error {
	defer lockAll(members)()
	for _, m := range members {
		if m.Running() {
			m.signalGroup(syscall.SIGCONT)
			continue
		}
		if err := m.launch(ctx); err != nil {
			return err
		}
	}
	return waitMembers(ctx, members)
}

func lockAll(members []*Proc) func() {
	for _, m := range members {
		m.life.Lock()
	}
	return func() {
		for _, m := range members {
			m.life.Unlock()
		}
	}
}

func addrs(members []*Proc) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.Addr()
	}
	return out
}
