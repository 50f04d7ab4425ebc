// Package internal holds the library's mechanics, shared by its packages
// and used by nothing else: owner ids (owner), retry delays (backoff),
// lease keys as path segments (keypath), the lease logic of pglease and
// sqlitelease (rowlease), numbered migrations (migrate), the Redis
// backends' scripts (redisscript) and wake-ups (redisnotify), node names
// (node) and the diagnosis of an unreachable server (reach).
//
// The rig of the tests, the benchmarks and the lab (real servers, the
// tests' connections, failpoints, harnesses) is under internal/testing, so
// that a reader of the library does not meet it beside its lowest layer.
package internal
