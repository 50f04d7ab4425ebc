// Package etcdzk compares etcdlease (both modes) with etcd's own
// concurrency.Mutex and zklease with go-zookeeper's zk.Lock, on the shared
// test servers: one acquire plus one release of a free key, each goroutine
// on a key of its own. Subjects lists them; the compare command measures
// them in one run, in rotating interleaved rounds, and prints the ratios:
//
//	cd bench && go run ./etcdzk/compare [-rounds 10] [-round 1s] [-goroutines 1,16] [-md FILE]
//
// The go test benchmarks run the same subjects one after another:
//
//	cd bench && go test -run '^$' -bench . -benchtime 3s ./etcdzk
//
// The like of etcdlease's default mode (an etcd lease per grant) is a Mutex
// with a session per lock; the like of its session mode (one etcd lease for
// all of a Locker's grants) is a Mutex on a shared session, here one session
// per goroutine reused for every lock, because two Mutexes on one session
// pass each other.
package etcdzk
