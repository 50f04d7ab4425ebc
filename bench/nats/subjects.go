package natsbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/bench/etcdzk"
	redisbench "github.com/aegislab/aegis/bench/redis"
	"github.com/aegislab/aegis/lease/natslease"
)

// TTL is the TTL of every grant (whole seconds, as NATS counts them).
const TTL = time.Minute

// Replicas is the replicas of both buckets: natslease's default, R3.
const Replicas = 3

// rawBucket is the raw recipe's bucket; natslease keeps its default.
const rawBucket = "aegis_bench_raw"

// Op is one acquire+release by goroutine g, on a key of g's own.
type Op func(ctx context.Context, g int) error

// Subject is one lock of the comparison.
type Subject struct {
	ID, Name string
	// New returns the subject's operation on a connection of its own;
	// close frees it.
	New func() (op Op, close func(), err error)
	// Handoff returns, for the contended handoff, the acquire of key by
	// goroutine g, on a connection of its own.
	Handoff func(key string) (acquire func(g int) redisbench.Acquire, close func(), err error)
}

// URLs are the shared cluster's servers (AEGIS_NATS_URLS) or their
// loopback defaults.
func URLs() []string {
	return strings.Split(cmp.Or(os.Getenv("AEGIS_NATS_URLS"), "nats://127.0.0.1:14222,nats://127.0.0.1:14223,nats://127.0.0.1:14224"), ",")
}

// Run is a random name for the keys of one run.
func Run() string { return etcdzk.Run() }

// connect is a connection of its own to the shared cluster.
func connect() (jetstream.JetStream, func(), error) {
	nc, err := nats.Connect(strings.Join(URLs(), ","), nats.Timeout(5*time.Second), nats.Name("aegis-bench"))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// Subjects are natslease and the raw recipe: the bucket's Create to take
// a key, its Delete to release it, on a bucket whose MaxAge is the TTL
// (ShedLock's JetStream provider's approach: it expires a lock by its
// bucket's TTL, with no per-key TTL).
func Subjects() []Subject {
	return []Subject{
		{ID: "natslease", Name: "natslease", New: natsleaseOp, Handoff: natsleaseHandoff},
		{ID: "raw", Name: "raw kv.Create + kv.Delete (ShedLock's recipe)", New: rawOp, Handoff: rawHandoff},
	}
}

func natsleaseLocker() (*natslease.Locker, func(), error) {
	js, closeFn, err := connect()
	if err != nil {
		return nil, nil, err
	}
	l, err := natslease.New(js, &natslease.Config{Replicas: Replicas})
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return l, closeFn, nil
}

func natsleaseOp() (Op, func(), error) {
	l, closeFn, err := natsleaseLocker()
	if err != nil {
		return nil, nil, err
	}
	r := Run()
	op := func(ctx context.Context, g int) error {
		lease, err := l.TryAcquire(ctx, fmt.Sprintf("bench/%s/%d", r, g), TTL)
		if err != nil {
			return err
		}
		return l.Release(ctx, lease)
	}
	return op, closeFn, nil
}

// natsleaseHandoff waits the way the library waits: aegis.Acquire, woken
// by the Locker's watch on the key.
func natsleaseHandoff(key string) (func(int) redisbench.Acquire, func(), error) {
	l, closeFn, err := natsleaseLocker()
	if err != nil {
		return nil, nil, err
	}
	return func(int) redisbench.Acquire {
		return func(ctx context.Context) (func(context.Context) error, error) {
			lease, err := aegis.Acquire(ctx, l, key, TTL)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return l.Release(ctx, lease) }, nil
		}
	}, closeFn, nil
}

func rawKV() (jetstream.KeyValue, func(), error) {
	js, closeFn, err := connect()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: rawBucket, History: 1, Replicas: Replicas, Storage: jetstream.FileStorage, TTL: TTL,
	})
	if err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("bucket %s: %w", rawBucket, err)
	}
	return kv, closeFn, nil
}

func rawOp() (Op, func(), error) {
	kv, closeFn, err := rawKV()
	if err != nil {
		return nil, nil, err
	}
	r := Run()
	op := func(ctx context.Context, g int) error {
		key := fmt.Sprintf("bench.%s.%d", r, g)
		for {
			_, err := kv.Create(ctx, key, []byte("locked"))
			if err == nil {
				break
			}
			if !taken(err) {
				return err
			}
			// The key is this goroutine's and free: Create read its
			// delete marker with a direct get from a replica that had
			// not applied the delete yet (natslease reads from the
			// stream's leader instead). Taken again, as a caller that
			// wants the lock would.
			RawRefusals.Add(1)
		}
		return kv.Delete(ctx, key)
	}
	return op, closeFn, nil
}

// RawRefusals counts the raw recipe's Creates refused on a free key (see
// rawOp), since the process started.
var RawRefusals atomic.Int64

// rawHandoff waits as a NATS user does without a library: a Create
// refused (the key exists) waits for the next change of the key on the
// goroutine's watch (the holder's delete) and tries again. Each goroutine
// keeps one watch, set up before its first Create, so that a delete in
// between is not missed; a stale wake-up only costs a refused Create.
func rawHandoff(key string) (func(int) redisbench.Acquire, func(), error) {
	kv, closeFn, err := rawKV()
	if err != nil {
		return nil, nil, err
	}
	key = strings.ReplaceAll(key, "/", ".")
	var mu sync.Mutex
	var watches []jetstream.KeyWatcher
	stop := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range watches {
			_ = w.Stop()
		}
		closeFn()
	}
	return func(int) redisbench.Acquire {
		var w jetstream.KeyWatcher
		return func(ctx context.Context) (func(context.Context) error, error) {
			if w == nil {
				var err error
				if w, err = kv.Watch(context.Background(), key, jetstream.UpdatesOnly(), jetstream.MetaOnly()); err != nil {
					return nil, err
				}
				mu.Lock()
				watches = append(watches, w)
				mu.Unlock()
			}
			for {
				_, err := kv.Create(ctx, key, []byte("locked"))
				if err == nil {
					return func(ctx context.Context) error { return kv.Delete(ctx, key) }, nil
				}
				if !taken(err) {
					return nil, err
				}
				select {
				case <-w.Updates():
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
	}, stop, nil
}

// taken reports whether a Create was refused because the key has a value:
// it exists (10071), or a release's delete marker was replaced between
// Create's read of it and its write (10164 on a replicated bucket).
func taken(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		(errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}
