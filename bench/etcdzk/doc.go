// Package etcdzk compares etcdlease with etcd's own concurrency.Mutex and
// zklease with go-zookeeper's zk.Lock, on the shared test servers, in the
// same run: one acquire plus one release of a free key, each goroutine on a
// key of its own.
//
//	cd bench && go test -run '^$' -bench . -benchtime 3s ./etcdzk
//
// The fair peer of etcdlease (an etcd lease per grant) is a Mutex with a
// session per operation: a session is an etcd lease, and a session shared
// by two Mutexes lets them pass each other. The shared-session Mutex is
// measured too, as the floor of two round trips per acquire+release.
package etcdzk
