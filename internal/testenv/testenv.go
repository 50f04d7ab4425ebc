// Package testenv finds the real servers tests run against. (Interim
// version; replaced by the infra branch.)
package testenv

import (
	"cmp"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgresURL is the URL of the test PostgreSQL.
func PostgresURL(t testing.TB) string {
	return cmp.Or(os.Getenv("AEGIS_POSTGRES_URL"), "postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable")
}

// schema creates a fresh schema and returns its name.
func schema(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	p, err := pgxpool.New(t.Context(), PostgresURL(t))
	if err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
	defer p.Close()
	if _, err := p.Exec(t.Context(), "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("PostgreSQL at %s unreachable (AEGIS_POSTGRES_URL): %v; run scripts/services start", PostgresURL(t), err)
	}
	return name
}

// Postgres returns a pool whose search_path is a fresh schema.
func Postgres(t testing.TB) *pgxpool.Pool {
	s := schema(t)
	cfg, err := pgxpool.ParseConfig(PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// PostgresSQL is Postgres through database/sql.
func PostgresSQL(t testing.TB) *sql.DB {
	db := stdlib.OpenDBFromPool(Postgres(t))
	t.Cleanup(func() { db.Close() })
	return db
}
