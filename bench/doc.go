// Package bench compares Aegis with its peers (redsync, bsm/redislock,
// etcd's concurrency.Mutex, go-zookeeper's Lock, River, the raw NATS
// key-value Create and Delete) on the same servers
// in the same run. It is a module of its own so that the peers never enter
// the library's go.mod.
//
//	make bench-peers   (or: cd bench && go test -run '^$' -bench . ./...)
//
// The queue's comparison also runs the bare protocol, the least a SKIP
// LOCKED queue does (no fence, heartbeat or reaper), and a realistic
// workload (1 ms of work per job, 4,000 jobs standing): see queue/main.go.
//
// The servers are the shared ones of scripts/services, found through the
// AEGIS_* variables.
package bench
