package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/redisscript"
)

// linger is how long a key's wake-up subscription outlives its last waiter.
const linger = 2 * time.Second

// Notify implements aegis.Notifier: the channel receives a value when key
// is released through any Locker with the same prefix on any of the
// nodes (every release publishes on each node it frees). It subscribes on
// every node at once and returns when a quorum has confirmed, or when every
// node has answered: a minority of nodes that are down or slow costs no
// wake-up, since a release frees the key on a majority. It fails only when
// no node subscribes, with each node's reason (a refused SUBSCRIBE is an
// error that says which permission is missing). With Config.NoWakeups it
// returns a nil channel, which never fires: the waiter polls.
//
// Without wake-ups a waiter's poll must land in the gap between a greedy
// holder's release and its next grant, and starves; with them it races
// the holder on equal terms.
func (l *Locker) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, nil, err
	}
	if l.hubs == nil {
		return nil, func() {}, nil
	}
	channel := redisscript.LockFor(l.prefix, key).Channel()
	type sub struct {
		i    int
		ch   <-chan struct{}
		stop func()
		err  error
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan sub, len(l.hubs))
	for i, h := range l.hubs {
		go func() {
			ch, stop, err := h.Notify(sctx, channel)
			results <- sub{i, ch, stop, err}
		}()
	}
	var subs []sub
	var errs []error
	for range l.hubs {
		r := <-results // each ends at its confirmation, its refusal or sctx's end
		if r.err != nil {
			if ctx.Err() == nil && !errors.Is(r.err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", l.name(r.i), r.err))
			}
			continue
		}
		if subs = append(subs, r); len(subs) == l.quorum {
			cancel() // enough: the others give up their wait
		}
	}
	if err := ctx.Err(); err != nil {
		for _, s := range subs {
			s.stop()
		}
		return nil, nil, fmt.Errorf("redlock: notify %q: %w", key, err)
	}
	if len(subs) == 0 {
		return nil, nil, fmt.Errorf("redlock: notify %q: no node subscribed: %w", key, errors.Join(errs...))
	}
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	var forward sync.WaitGroup
	for _, s := range subs {
		forward.Go(func() {
			for {
				select {
				case _, ok := <-s.ch:
					if !ok {
						return
					}
					select {
					case wake <- struct{}{}:
					default:
					}
				case <-done:
					return
				}
			}
		})
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(done)
			forward.Wait()
			for _, s := range subs {
				s.stop()
			}
		})
	}
	return wake, stop, nil
}
