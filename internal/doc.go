// Package internal holds the library's mechanics, shared by its packages
// and used by nothing else: owner ids (owner), retry delays (backoff),
// lease keys as path segments (keypath), the lease logic of pglease and
// sqlitelease (rowlease), numbered migrations (migrate), the Redis
// backends' scripts (redisscript) and wake-ups (redisnotify), node names
// (node) and the diagnosis of an unreachable server (reach).
//
// The tool's parts — the command line, the lab's and the tests' servers,
// test and benchmark helpers — are under internal/tool, so that a reader
// of the library does not meet them beside its lowest layer.
package internal
