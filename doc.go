// Package aegis is fenced coordination for Go services that run as several
// replicas.
//
// Every lock with a timeout is a lease: its holder can be paused (a GC pause,
// a SIGSTOP, a stalled disk) past the lease's TTL and still believe it holds
// the key while a second owner has been granted it. Aegis does not pretend
// otherwise. Every grant carries a fencing [Token] issued by the store, strictly
// greater than every earlier grant's token for the same key, and the store of
// record checks it (package fence) so that a stale holder's write changes
// nothing.
//
// A [Locker] is one store's lease table: PostgreSQL (lease/pglease), SQLite
// (lease/sqlitelease, the embedded default), in-process (lease/memlease), and
// the Redis, Redlock, etcd and ZooKeeper backends. All of them pass the same
// conformance suite (package locktest).
//
// [Acquire] waits for a key; [Hold] acquires it and keeps it alive, cancelling
// [Held.Context] as soon as the lease can no longer be trusted, so that work
// stops before another owner can be granted the key:
//
//	h, err := aegis.Hold(ctx, locker, "invoice-export/2026-10", 30*time.Second)
//	if err != nil {
//		return err
//	}
//	defer h.Release(ctx)
//	return export(h.Context(), h.Token()) // every write carries the token
//
// What a lease does not guarantee: that its holder is the only process
// running the critical section. Only the fence, checked by the store of
// record in the same transaction as the write, guarantees that a stale
// holder's write is rejected.
package aegis
