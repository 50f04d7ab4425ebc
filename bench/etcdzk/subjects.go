package etcdzk

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/aegislab/aegis/lease/etcdlease"
	"github.com/aegislab/aegis/lease/zklease"
)

// TTL is the TTL of every grant and session of the comparison.
const TTL = time.Minute

// Op is one acquire+release by goroutine g, on a key of g's own.
type Op func(ctx context.Context, g int) error

// Subject is one lock of the comparison.
type Subject struct {
	ID, Name string
	// New prepares the subject for the given number of goroutines; close
	// frees what it holds.
	New func(goroutines int) (op Op, close func(), err error)
}

// EtcdEndpoints and ZKServers are the shared test servers
// (AEGIS_ETCD_ENDPOINTS, AEGIS_ZK_SERVERS) or their loopback defaults.
func EtcdEndpoints() []string {
	return strings.Split(cmp.Or(os.Getenv("AEGIS_ETCD_ENDPOINTS"), "http://127.0.0.1:12379,http://127.0.0.1:12381,http://127.0.0.1:12383"), ",")
}

func ZKServers() []string {
	return strings.Split(cmp.Or(os.Getenv("AEGIS_ZK_SERVERS"), "127.0.0.1:12181,127.0.0.1:12182,127.0.0.1:12183"), ",")
}

// Run is a random name for the keys of one run.
func Run() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// EtcdClient is a client of its own on the shared cluster.
func EtcdClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: EtcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// Subjects are etcdlease in both modes, concurrency.Mutex with a session
// per lock and with a session per goroutine reused for every lock, zklease
// and zk.Lock, each on a client (connection) of its own.
func Subjects() []Subject {
	return []Subject{
		{ID: "etcdlease", Name: "etcdlease, etcd lease per grant (default)", New: func(int) (Op, func(), error) {
			return etcdleaseOp(nil)
		}},
		{ID: "etcdlease-session", Name: "etcdlease, session mode", New: func(int) (Op, func(), error) {
			return etcdleaseOp(&etcdlease.Config{Session: true})
		}},
		{ID: "mutex-session-per-op", Name: "concurrency.Mutex, session per lock", New: mutexPerLock},
		{ID: "mutex-shared-session", Name: "concurrency.Mutex, shared session", New: mutexShared},
		{ID: "zklease", Name: "zklease", New: zkleaseOp},
		{ID: "zk.Lock", Name: "go-zookeeper zk.Lock", New: zkLock},
	}
}

func etcdleaseOp(cfg *etcdlease.Config) (Op, func(), error) {
	c, err := EtcdClient()
	if err != nil {
		return nil, nil, err
	}
	l, err := etcdlease.New(c, cfg)
	if err != nil {
		c.Close()
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
	return op, func() { _ = l.Close(); c.Close() }, nil
}

func mutexPerLock(int) (Op, func(), error) {
	c, err := EtcdClient()
	if err != nil {
		return nil, nil, err
	}
	r := Run()
	op := func(ctx context.Context, g int) error {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(TTL/time.Second)))
		if err != nil {
			return err
		}
		defer s.Close()
		m := concurrency.NewMutex(s, fmt.Sprintf("bench-mutex/%s/%d", r, g))
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
	return op, func() { c.Close() }, nil
}

// mutexShared gives each goroutine a session of its own, reused for every
// lock: one session shared by two goroutines would let their Mutexes pass
// each other.
func mutexShared(n int) (Op, func(), error) {
	c, err := EtcdClient()
	if err != nil {
		return nil, nil, err
	}
	sessions := make([]*concurrency.Session, n)
	closeAll := func() {
		for _, s := range sessions {
			if s != nil {
				_ = s.Close()
			}
		}
		c.Close()
	}
	for g := range sessions {
		if sessions[g], err = concurrency.NewSession(c, concurrency.WithTTL(int(TTL/time.Second))); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	r := Run()
	op := func(ctx context.Context, g int) error {
		m := concurrency.NewMutex(sessions[g], fmt.Sprintf("bench-mutex/%s/%d", r, g))
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
	return op, closeAll, nil
}

func zkleaseOp(int) (Op, func(), error) {
	conn, cfg, err := zklease.Connect(ZKServers(), TTL, zk.WithLogger(quiet{}))
	if err != nil {
		return nil, nil, err
	}
	l, err := zklease.New(conn, cfg)
	if err != nil {
		conn.Close()
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
	return op, func() { _ = l.Close(); conn.Close() }, nil
}

func zkLock(int) (Op, func(), error) {
	conn, _, err := zk.Connect(ZKServers(), TTL, zk.WithLogger(quiet{}))
	if err != nil {
		return nil, nil, err
	}
	r := Run()
	op := func(_ context.Context, g int) error {
		m := zk.NewLock(conn, fmt.Sprintf("/bench-zklock/%s/%d", r, g), zk.WorldACL(zk.PermAll))
		if err := m.Lock(); err != nil {
			return err
		}
		return m.Unlock()
	}
	return op, conn.Close, nil
}
