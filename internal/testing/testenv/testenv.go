// Package testenv connects tests to the shared test servers that
// scripts/services starts (PostgreSQL, Redis, etcd, ZooKeeper, NATS) and
// isolates each test on them: a fresh PostgreSQL schema (per call of
// Postgres and PostgresSQL, per test for PostgresURL), a unique key prefix
// for Redis, etcd, ZooKeeper and NATS.
//
// Servers are found through AEGIS_POSTGRES_URL, AEGIS_REDIS_ADDRS,
// AEGIS_ETCD_ENDPOINTS, AEGIS_ZK_SERVERS and AEGIS_NATS_URLS, each defaulting to the shared
// servers' loopback ports. Each is checked once per test binary, within
// about 2 s; a server that does not answer fails the test with a message
// that names the server, its address, the variable and the fix. A test is
// never skipped for a missing server: CI must not pass by testing nothing.
//
// What isolation does not cover: PostgreSQL's LISTEN/NOTIFY channels and
// advisory locks are per database, not per schema, so a test names them with
// [Key]. Destructive tests (killing, pausing or restarting a server) must
// not use the shared servers: they start private ones with
// internal/testing/servers.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis/internal/testing/servers"
)

// checkTimeout bounds the reachability check of one server kind.
const checkTimeout = 2 * time.Second

// PostgresURL returns a connection URL for a schema of the test's own on
// the test PostgreSQL server: its search_path is set (through the options
// parameter, which pgx and libpq both understand), so unqualified names
// land in that schema. Unlike [Postgres], calls with the same t return the
// same URL, so that the pools or processes of one test (the instances of a
// conformance test, the nodes of a lab run) share one schema; every test,
// subtests included, gets its own. The schema is dropped when the test
// ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	v, _ := testURLs.LoadOrStore(t, &testURL{})
	tu := v.(*testURL)
	tu.once.Do(func() {
		t.Cleanup(func() { testURLs.Delete(t) })
		base, schema := newSchema(t)
		u, err := url.Parse(base)
		if err != nil {
			tu.err = fmt.Errorf("testenv: %s is not a URL: %v", servers.EnvPostgresURL, err)
			return
		}
		q := u.Query()
		q.Set("options", "-csearch_path="+schema)
		u.RawQuery = q.Encode()
		tu.url = u.String()
	})
	if tu.err != nil || tu.url == "" {
		t.Fatalf("testenv: no PostgreSQL URL for %s: %v", t.Name(), tu.err)
	}
	return tu.url
}

// testURLs holds PostgresURL's URL for each running test.
var testURLs sync.Map // testing.TB → *testURL

type testURL struct {
	once sync.Once
	url  string
	err  error
}

// Postgres returns a pgx pool whose connections use a fresh schema of
// their own (search_path): each call, another schema. The pool is closed and the schema dropped when
// the test ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	base, schema := newSchema(t)
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", servers.EnvPostgresURL, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: open a pool on %s: %v", cfg.ConnConfig.Host, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// PostgresSQL returns a database/sql handle (pgx's stdlib driver) whose
// connections use a fresh schema of their own (search_path): each call,
// another schema. It is closed
// and the schema dropped when the test ends.
func PostgresSQL(t testing.TB) *sql.DB {
	t.Helper()
	base, schema := newSchema(t)
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", servers.EnvPostgresURL, err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newSchema checks the server, creates a schema named after the test and
// registers its drop. It returns the server's URL and the schema's name.
func newSchema(t testing.TB) (baseURL, schema string) {
	t.Helper()
	baseURL = postgresBaseURL(t)
	schema = schemaName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		t.Fatalf("testenv: connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "create schema "+ident); err != nil {
		t.Fatalf("testenv: create schema %s: %v", ident, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, baseURL)
		if err != nil {
			t.Errorf("testenv: drop schema %s: %v", ident, err)
			return
		}
		defer conn.Close(ctx)
		// A connection the test left open in a transaction holds locks:
		// fail rather than hang.
		_, err = conn.Exec(ctx, "set lock_timeout = '5s'")
		if err == nil {
			_, err = conn.Exec(ctx, "drop schema if exists "+ident+" cascade")
		}
		if err != nil {
			t.Errorf("testenv: drop schema %s (did the test leave a transaction open?): %v", ident, err)
		}
	})
	return baseURL, schema
}

func postgresBaseURL(t testing.TB) string {
	t.Helper()
	raw := lookup(servers.EnvPostgresURL)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatalf("testenv: %s is not a PostgreSQL URL: %v", servers.EnvPostgresURL, err) // pgx redacts passwords
	}
	addr := net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	check(t, "PostgreSQL", servers.EnvPostgresURL, []string{addr}, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, raw)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx)
	})
	return raw
}

// RedisAddrs returns the host:port addresses of the test Redis servers:
// independent primaries, the first being the single-node one (Redlock
// uses the others, or all). Tests share them: prefix every key with
// [Key].
func RedisAddrs(t testing.TB) []string {
	t.Helper()
	addrs := split(lookup(servers.EnvRedisAddrs))
	check(t, "Redis", servers.EnvRedisAddrs, addrs, func(ctx context.Context) error {
		return each(addrs, func(a string) error {
			reply, err := servers.RedisCommand(ctx, a, "PING")
			if err == nil && reply != "PONG" {
				err = fmt.Errorf("PING answered %q", reply)
			}
			return err
		})
	})
	return addrs
}

// EtcdEndpoints returns the client URLs of the test etcd cluster's members.
// Tests share it: prefix every key with [Key].
func EtcdEndpoints(t testing.TB) []string {
	t.Helper()
	endpoints := split(lookup(servers.EnvEtcdEndpoints))
	var addrs []string
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" {
			t.Fatalf("testenv: %s holds %q, not a list of http://host:port URLs", servers.EnvEtcdEndpoints, e)
		}
		addrs = append(addrs, u.Host)
	}
	check(t, "etcd", servers.EnvEtcdEndpoints, addrs, func(ctx context.Context) error {
		return each(addrs, func(a string) error { return servers.Probe(ctx, servers.KindEtcd, a) })
	})
	return endpoints
}

// ZKServers returns the host:port addresses of the test ZooKeeper
// ensemble's members. Tests share it: put every node under a path made
// with [Key].
func ZKServers(t testing.TB) []string {
	t.Helper()
	addrs := split(lookup(servers.EnvZKServers))
	check(t, "ZooKeeper", servers.EnvZKServers, addrs, func(ctx context.Context) error {
		return each(addrs, func(a string) error { return servers.Probe(ctx, servers.KindZooKeeper, a) })
	})
	return addrs
}

// NATSURLs returns the client URLs (nats://host:port) of the test NATS
// cluster's servers, three with JetStream. Tests share it: name every
// key, bucket or stream with [Key].
func NATSURLs(t testing.TB) []string {
	t.Helper()
	urls := split(lookup(servers.EnvNATSURLs))
	var addrs []string
	for _, e := range urls {
		u, err := url.Parse(e)
		if err != nil || u.Scheme != "nats" || u.Host == "" {
			t.Fatalf("testenv: %s holds %q, not a list of nats://host:port URLs", servers.EnvNATSURLs, e)
		}
		addrs = append(addrs, u.Host)
	}
	check(t, "NATS", servers.EnvNATSURLs, addrs, func(ctx context.Context) error {
		return each(addrs, func(a string) error { return servers.Probe(ctx, servers.KindNATS, a) })
	})
	return urls
}

// Key returns a key prefix unique to this call: the test's name (with
// characters other than letters, digits, '_', '-' and '.' replaced by '_',
// at most 80 bytes) and a random suffix, as in "TestRenew_expired-1f2e3d4c".
// It is safe in Redis and etcd keys, ZooKeeper node names and PostgreSQL
// channel names (quote those).
func Key(t testing.TB) string {
	return sanitize(t.Name(), 80) + "-" + randomHex(4)
}

// schemaName is Key for a PostgreSQL schema: lower case letters, digits
// and '_' only (so that it needs no quoting in search_path), at most 63
// bytes.
func schemaName(test string) string {
	s := strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToLower(sanitize(test, 50)))
	return "t_" + s + "_" + randomHex(4)
}

func sanitize(s string, max int) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) > max {
		b = b[:max]
	}
	if len(b) == 0 {
		return "test"
	}
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// lookup returns the variable's value, or the shared servers' default.
func lookup(name string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	for _, kv := range servers.SharedEnv() {
		if kv[0] == name {
			return kv[1]
		}
	}
	panic("testenv: no default for " + name)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func each(addrs []string, f func(string) error) error {
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			if err := f(a); err != nil {
				errs[i] = fmt.Errorf("%s: %w", a, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checks caches each server check for the life of the test binary, so a
// missing server costs one timeout, not one per test.
var checks sync.Map // string → *checkResult

type checkResult struct {
	once sync.Once
	err  error
}

// check fails t when probe does not succeed within checkTimeout.
func check(t testing.TB, server, env string, addrs []string, probe func(context.Context) error) {
	t.Helper()
	if len(addrs) == 0 {
		t.Fatalf("testenv: %s is set but lists no %s address", env, server)
	}
	v, _ := checks.LoadOrStore(env+"="+strings.Join(addrs, ","), &checkResult{})
	r := v.(*checkResult)
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		r.err = probe(ctx)
	})
	if r.err != nil {
		source := "the default; " + env + " is unset"
		if os.Getenv(env) != "" {
			source = "from " + env
		}
		t.Fatalf("testenv: the test %s server at %s (%s) does not answer: %v\n"+
			"Start the shared test servers with `scripts/services start` and export their addresses with "+
			"`eval \"$(scripts/services env)\"`, or run the whole suite with `make test`.",
			server, strings.Join(addrs, ","), source, r.err)
	}
}
