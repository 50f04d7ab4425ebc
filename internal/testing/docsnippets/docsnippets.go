// Package docsnippets keeps the Go snippets of README.md and docs/*.md
// honest. Its test fails when a ```go block is not, modulo whitespace, the
// text of code in some example_*_test.go file, so a snippet cannot drift
// from the example that runs it. The examples start where a new user
// starts, from an empty database: Env and Postgres give them one.
//
// A fenced block that is not a program says so in its info string: ```go
// signatures for an API listing (declarations, not statements), or
// another language (```sh, ```text, ```json, ```sql). A block without
// an info string fails the test: it could be Go that nothing checks.
package docsnippets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis/internal/testing/servers"
)

// Env returns the AEGIS_* variable name (AEGIS_POSTGRES_URL,
// AEGIS_REDIS_ADDRS, AEGIS_ETCD_ENDPOINTS, AEGIS_ZK_SERVERS), or the shared
// test servers' default for it when it is unset.
func Env(name string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	for _, kv := range servers.SharedEnv() {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// List is Env split at commas.
func List(name string) []string {
	var out []string
	for _, f := range strings.Split(Env(name), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Postgres returns a pool on a new, empty schema of the test PostgreSQL (its
// connections' search_path), so that an example meets the database a new
// user has, and a function that closes the pool and drops the schema.
func Postgres(ctx context.Context) (*pgxpool.Pool, func(), error) {
	cfg, err := pgxpool.ParseConfig(Env(servers.EnvPostgresURL))
	if err != nil {
		return nil, nil, fmt.Errorf("docsnippets: %s: %w", servers.EnvPostgresURL, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, nil, fmt.Errorf("docsnippets: the example needs the test PostgreSQL (scripts/services start): %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		_ = admin.Close(ctx)
		return nil, nil, fmt.Errorf("docsnippets: create schema: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		_ = admin.Close(ctx)
		return nil, nil, fmt.Errorf("docsnippets: %w", err)
	}
	drop := func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A transaction an example left open would hold locks: fail, not hang.
		_, _ = admin.Exec(ctx, "SET lock_timeout = '5s'")
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(ctx)
	}
	return pool, drop, nil
}

// Key returns a unique prefix for an example's keys on a shared server
// (Redis, etcd, ZooKeeper): "example-" and random hex.
func Key() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "example-" + hex.EncodeToString(b[:])
}
