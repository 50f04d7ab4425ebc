// Package internal holds the library's mechanics, each imported by the
// library's packages (the program and the rig may use them too): who is
// writing (actor), retry delays (backoff), the caller's mistakes
// (badinput), storable error texts (errtext), lease keys as path segments
// (keypath), a test's judgement of a lost lease (losswatch, for locktest),
// numbered migrations (migrate), node names (node), the write of an
// outcome (outcome), owner ids (owner), shared Prometheus collectors
// (promreg), the diagnosis of an unreachable server (reach), the Redis
// backends' wake-ups and scripts (redisnotify, redisscript), the lease
// logic of pglease and sqlitelease (rowlease) and the web pages' access
// rules (webaccess, for the console).
//
// The rig of the tests, the benchmarks and the lab (real servers, the
// tests' connections, failpoints, harnesses) is under internal/testing,
// and the aegis program's parts are under cmd/aegis/internal, so that a
// reader of the library does not meet them beside its lowest layer
// (docs/architecture.md).
package internal
