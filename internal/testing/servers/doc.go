// Package servers starts real PostgreSQL, Redis, etcd and ZooKeeper servers
// from the binaries installed on this machine, and a NATS cluster with
// JetStream from nats-server built from the tool module tools/nats
// ([BuildNATS]: Debian's is older than the per-key TTLs lease/natslease
// needs), on loopback ports, with their data, configuration, logs and pid
// files in a directory the caller gives. It also builds Jaeger all-in-one from the tool module tools/jaeger
// ([BuildJaeger]) and starts it ([StartJaeger]): a kind apart, not in
// [Kinds], since its first build takes minutes.
//
// It is the one implementation behind the shared test servers
// (scripts/services, through `aegis services`), the private servers that
// destructive tests start for themselves (a Redis failover, a killed etcd
// leader, a killed ZooKeeper member, a PostgreSQL hot standby that
// [StartStandby] streams from a private primary and [Postgres.Promote]
// promotes), and the lab, which starts a whole [Set] on free ports.
//
// Every process is a [Proc]: Addr, Stop (graceful, waits), Kill (SIGKILL
// to the server and every process it started, so that it can restart at
// once), Pause and Resume (SIGSTOP and SIGCONT to its process group: a
// PostgreSQL server's backends lead sessions of their own, so they are not
// paused and serve the connections they have), Restart (same ports, same
// data) and Wipe. Start functions return only once every server answers its
// protocol's health check (PostgreSQL accepts a login, Redis answers PING,
// an etcd member reports a healthy cluster, a ZooKeeper member serves, a
// NATS server serves JetStream), or
// fail within a bound with an error that names the server, its address and
// the last lines of its log.
//
// What it guarantees about leftovers: a process started without
// [RedisConfig.Detach] (and the like) gets SIGKILL from the kernel when the
// process that started it dies, even by SIGKILL, so a crashed test binary
// or lab leaves nothing running. A detached process outlives its starter on
// purpose; its pid file lets a later call adopt it ([Inspect], [StopDir],
// or a start with Detach set, which is idempotent). It does not survive a
// reboot, and its data (on a scratch directory) is not meant to.
//
// Ports: a zero port means a free one, picked below the kernel's ephemeral
// range so that no outgoing connection can take it between the pick and the
// server's bind; when a picked port is taken anyway (another test package
// picked it first), the start is retried on new ports.
//
// When this process runs as root, PostgreSQL runs as the system user
// postgres (created when missing), owns its data directory, and the
// directories above it are given search permission for others (o+x) where
// they lack it, since PostgreSQL refuses to run as root and must reach its
// data directory.
package servers
