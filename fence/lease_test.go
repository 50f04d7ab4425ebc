package fence_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/locktest"
)

// Owners of the tests' leases: values a real grant could have, long enough
// that finding one in an error or a row cannot be a coincidence.
const (
	ownerA = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	ownerB = "a1b2c3d4e5f60718293a4b5c6d7e8f90:7"
)

// target is one way of reaching the fence: pgx on PostgreSQL, database/sql
// on PostgreSQL, database/sql on SQLite. Each check runs in a transaction
// of its own and commits unless the fence refuses it.
type target struct {
	name    string
	db      *sql.DB // nil for pgx
	migrate func(ctx context.Context) error
	exec    func(ctx context.Context, query string, args ...any) error
	// checkLease runs CheckLease and, when label is not empty, inserts a
	// ledger row (resource, label): the business write it fences.
	checkLease func(ctx context.Context, resource string, l aegis.Lease, label string) error
	check      func(ctx context.Context, resource string, token aegis.Token) error
	// row reads the fence row of resource.
	row func(ctx context.Context, resource string) (token int64, hash sql.NullString, err error)
	// rows counts the ledger rows of resource with label.
	rows func(ctx context.Context, resource, label string) (int, error)
}

// newTargets returns the three targets on fresh, empty schemas and files.
func newTargets(t *testing.T) []target {
	t.Helper()
	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	return []target{pgxTarget(testenv.Postgres(t)), sqlTarget("postgres sql", testenv.PostgresSQL(t)), sqlTarget("sqlite", sqlite)}
}

// migratedTargets returns newTargets with the fence table and a ledger.
func migratedTargets(t *testing.T) []target {
	t.Helper()
	ts := newTargets(t)
	for _, tg := range ts {
		require.NoError(t, tg.migrate(t.Context()), tg.name)
		require.NoError(t, tg.exec(t.Context(), "CREATE TABLE ledger (resource text NOT NULL, label text NOT NULL)"), tg.name)
	}
	return ts
}

func pgxTarget(pool *pgxpool.Pool) target {
	return target{
		name:    "pgx",
		migrate: func(ctx context.Context) error { return fence.Migrate(ctx, pool) },
		exec: func(ctx context.Context, query string, args ...any) error {
			_, err := pool.Exec(ctx, query, args...)
			return err
		},
		checkLease: func(ctx context.Context, resource string, l aegis.Lease, label string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := fence.CheckLease(ctx, tx, resource, l); err != nil {
					return err
				}
				if label == "" {
					return nil
				}
				_, err := tx.Exec(ctx, "INSERT INTO ledger (resource, label) VALUES ($1, $2)", resource, label)
				return err
			})
		},
		check: func(ctx context.Context, resource string, token aegis.Token) error {
			return checkPG(ctx, pool, resource, token)
		},
		row: func(ctx context.Context, resource string) (token int64, hash sql.NullString, err error) {
			err = pool.QueryRow(ctx, "SELECT token, owner_hash FROM aegis_fence WHERE resource = $1", resource).Scan(&token, &hash)
			return token, hash, err
		},
		rows: func(ctx context.Context, resource, label string) (n int, err error) {
			err = pool.QueryRow(ctx, "SELECT count(*) FROM ledger WHERE resource = $1 AND label = $2", resource, label).Scan(&n)
			return n, err
		},
	}
}

func sqlTarget(name string, db *sql.DB) target {
	return target{
		name:    name,
		db:      db,
		migrate: func(ctx context.Context) error { return fence.MigrateSQL(ctx, db) },
		exec: func(ctx context.Context, query string, args ...any) error {
			_, err := db.ExecContext(ctx, query, args...)
			return err
		},
		checkLease: func(ctx context.Context, resource string, l aegis.Lease, label string) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() // after Commit, a no-op
			if err := fence.CheckLeaseSQL(ctx, tx, resource, l); err != nil {
				return err
			}
			if label != "" {
				if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (resource, label) VALUES ($1, $2)", resource, label); err != nil {
					return err
				}
			}
			return tx.Commit()
		},
		check: func(ctx context.Context, resource string, token aegis.Token) error {
			return checkSQL(ctx, db, resource, token)
		},
		row: func(ctx context.Context, resource string) (token int64, hash sql.NullString, err error) {
			err = db.QueryRowContext(ctx, "SELECT token, owner_hash FROM aegis_fence WHERE resource = $1", resource).Scan(&token, &hash)
			return token, hash, err
		},
		rows: func(ctx context.Context, resource, label string) (n int, err error) {
			err = db.QueryRowContext(ctx, "SELECT count(*) FROM ledger WHERE resource = $1 AND label = $2", resource, label).Scan(&n)
			return n, err
		},
	}
}

// hashOf is the documented record of an owner: hex SHA-256.
func hashOf(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:])
}

// requireRow asserts the fence row of resource: its token, and the owner
// whose hash it records ("" for none).
func requireRow(t *testing.T, tg target, resource string, token int64, owner string) {
	t.Helper()
	got, hash, err := tg.row(t.Context(), resource)
	require.NoError(t, err)
	require.Equal(t, token, got, "the fence's token")
	if owner == "" {
		require.False(t, hash.Valid, "a bare token records no owner")
		return
	}
	require.True(t, hash.Valid, "the row records an owner")
	require.Equal(t, hashOf(owner), hash.String, "the row records the owner's hash")
	require.NotContains(t, hash.String, owner, "the owner itself is never stored")
}

// requireStale asserts err is ErrStale, says what, and hides the owners.
func requireStale(t *testing.T, err error, want string) {
	t.Helper()
	require.ErrorIs(t, err, aegis.ErrStale)
	require.ErrorContains(t, err, want)
	for _, owner := range []string{ownerA, ownerB} {
		require.NotContains(t, err.Error(), owner)
		require.NotContains(t, err.Error(), hashOf(owner), "nor its hash")
		locktest.RequireHidden(t, owner, err)
	}
}

func TestCheckLease(t *testing.T) {
	t.Parallel()
	for _, tg := range migratedTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			a5 := aegis.Lease{Key: "k", Token: 5, Owner: ownerA}
			b5 := aegis.Lease{Key: "k", Token: 5, Owner: ownerB}

			require.NoError(t, tg.checkLease(ctx, "r", a5, "a"), "a first token lands")
			requireRow(t, tg, "r", 5, ownerA)
			require.NoError(t, tg.checkLease(ctx, "r", a5, "a"), "the same holder writes again with its token")
			require.NoError(t, tg.checkLease(ctx, "r", a5, "a"), "and again")

			err := tg.checkLease(ctx, "r", b5, "b")
			requireStale(t, err, `resource "r" already accepted token 5 from another owner`)
			requireHeld(t, err, "r", 5, 5)
			requireRow(t, tg, "r", 5, ownerA)
			n, err := tg.rows(ctx, "r", "b")
			require.NoError(t, err)
			require.Zero(t, n, "the refused holder's write was rolled back")

			err = tg.checkLease(ctx, "r", aegis.Lease{Key: "k", Token: 4, Owner: ownerB}, "b")
			requireStale(t, err, `resource "r" already accepted a token greater than 4`)
			requireHeld(t, err, "r", 4, 5)
			err = tg.checkLease(ctx, "r", aegis.Lease{Key: "k", Token: 4, Owner: ownerA}, "a")
			requireStale(t, err, `resource "r" already accepted a token greater than 4`)
			requireRow(t, tg, "r", 5, ownerA)

			require.NoError(t, tg.checkLease(ctx, "r", aegis.Lease{Key: "k", Token: 9, Owner: ownerB}, "b"), "a greater token lands, from any owner")
			requireRow(t, tg, "r", 9, ownerB)
			err = tg.checkLease(ctx, "r", a5, "a")
			requireStale(t, err, "a token greater than 5")
			requireHeld(t, err, "r", 5, 9)
			require.NoError(t, tg.checkLease(ctx, "other", b5, ""), "resources are independent")
			requireRow(t, tg, "other", 5, ownerB)

			n, err = tg.rows(ctx, "r", "a")
			require.NoError(t, err)
			require.Equal(t, 3, n, "every accepted write of a committed")
			n, err = tg.rows(ctx, "r", "b")
			require.NoError(t, err)
			require.Equal(t, 1, n, "only b's greater token committed")
		})
	}
}

// TestCheckLeaseRace: two holders granted the same token (the Redis
// failover that sends the counter back) write at once, many times. Exactly
// one commits each round, whichever it is, with its business row; the
// other is ErrStale and leaves nothing.
func TestCheckLeaseRace(t *testing.T) {
	t.Parallel()
	rounds := map[string]int{"pgx": 40, "postgres sql": 40, "sqlite": 15}
	for _, tg := range migratedTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			for round := range rounds[tg.name] {
				resource := fmt.Sprintf("race%d", round)
				token := aegis.Token(round%3 + 1)
				if round%2 == 1 {
					// Half the rounds start from a row at a lower token:
					// the racers then meet on the update, not the insert.
					require.NoError(t, tg.check(ctx, resource, token))
				}
				holders := map[string]aegis.Lease{
					"a": {Key: "k", Token: token + 1, Owner: ownerA},
					"b": {Key: "k", Token: token + 1, Owner: ownerB},
				}
				errs := race(t, holders, func(label string, l aegis.Lease) error {
					return tg.checkLease(ctx, resource, l, label)
				})
				var winner string
				for label, err := range errs {
					if err == nil {
						require.Empty(t, winner, "round %d: both holders of token %d committed", round, token+1)
						winner = label
						continue
					}
					requireStale(t, err, fmt.Sprintf("already accepted token %d from another owner", token+1))
				}
				require.NotEmpty(t, winner, "round %d: neither holder committed: %v", round, errs)
				requireRow(t, tg, resource, int64(token+1), holders[winner].Owner)
				for label := range holders {
					n, err := tg.rows(ctx, resource, label)
					require.NoError(t, err)
					require.Equal(t, map[bool]int{true: 1, false: 0}[label == winner], n, "round %d: ledger rows of %s", round, label)
				}
			}
		})
	}
}

// race runs each holder's write in its own goroutine, released together,
// and returns their errors by label. Every wait is bounded.
func race(t *testing.T, holders map[string]aegis.Lease, write func(label string, l aegis.Lease) error) map[string]error {
	t.Helper()
	type result struct {
		label string
		err   error
	}
	results := make(chan result, len(holders))
	var ready sync.WaitGroup
	start := make(chan struct{})
	for label, l := range holders {
		ready.Add(1)
		go func() {
			ready.Done()
			<-start // closed below, or by the cleanup when the test fails first
			results <- result{label, write(label, l)}
		}()
	}
	allReady := make(chan struct{})
	go func() { ready.Wait(); close(allReady) }()
	select {
	case <-allReady:
	case <-time.After(10 * time.Second):
		close(start)
		t.Fatal("the racers did not start within 10s")
	}
	close(start)
	out := map[string]error{}
	for range holders {
		select {
		case r := <-results:
			out[r.label] = r.err
		case <-time.After(30 * time.Second):
			t.Fatal("a racer's transaction did not end within 30s")
		}
	}
	return out
}

// TestCheckLeaseBlocks makes the race's interleaving certain on PostgreSQL:
// the second holder of a token is blocked on the fence row while the first
// one's transaction is open, then refused when it commits, or accepted
// when it rolls back.
func TestCheckLeaseBlocks(t *testing.T) {
	t.Parallel()
	ctx, pool := t.Context(), testenv.Postgres(t)
	require.NoError(t, fence.Migrate(ctx, pool))
	require.NoError(t, checkPG(ctx, pool, "r", 1))
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("first commits %v", commit), func(t *testing.T) {
			token := aegis.Token(2)
			if !commit {
				token = 3
			}
			first, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer first.Rollback(ctx) // after Commit, a no-op
			require.NoError(t, fence.CheckLease(ctx, first, "r", aegis.Lease{Token: token, Owner: ownerA}))

			second, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer second.Rollback(ctx) // after Commit, a no-op
			var pid uint32
			require.NoError(t, second.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
			done := make(chan error, 1)
			go func() { done <- fence.CheckLease(ctx, second, "r", aegis.Lease{Token: token, Owner: ownerB}) }()

			require.Eventually(t, func() bool {
				var waiting bool
				err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", pid).Scan(&waiting)
				return err == nil && waiting
			}, 10*time.Second, 10*time.Millisecond, "the second holder never waited on the first one's fence row")
			select {
			case err := <-done:
				t.Fatalf("the second holder's check returned while the first one's transaction was open: %v", err)
			default:
			}

			if commit {
				require.NoError(t, first.Commit(ctx))
			} else {
				require.NoError(t, first.Rollback(ctx))
			}
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the second holder's check did not return within 30s of the first one's end")
			}
			if commit {
				requireStale(t, err, "already accepted token 2 from another owner")
				return
			}
			require.NoError(t, err, "the first holder rolled back: its token was never recorded")
			require.NoError(t, second.Commit(ctx))
			var hash string
			require.NoError(t, pool.QueryRow(ctx, "SELECT owner_hash FROM aegis_fence WHERE resource = 'r'").Scan(&hash))
			require.Equal(t, hashOf(ownerB), hash)
		})
	}
}

// TestCheckMixing: Check and CheckLease on one resource. A bare token
// names no owner, so an equal token never lands across the two: a holder
// that mixes them is refused with an error that says so, never let through.
// A greater token lands from either and sets (or drops) the owner.
func TestCheckMixing(t *testing.T) {
	t.Parallel()
	for _, tg := range migratedTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			a5 := aegis.Lease{Key: "k", Token: 5, Owner: ownerA}
			require.NoError(t, tg.checkLease(ctx, "r", a5, ""))

			err := tg.check(ctx, "r", 5)
			requireStale(t, err, `resource "r" accepted token 5 through fence.CheckLease: a bare fence.Check cannot show it comes from that lease's owner`)
			requireRow(t, tg, "r", 5, ownerA)
			requireStale(t, tg.check(ctx, "r", 4), "a token greater than 4")
			require.NoError(t, tg.checkLease(ctx, "r", a5, ""), "the lease's owner still writes")

			require.NoError(t, tg.check(ctx, "r", 6), "a greater bare token lands")
			requireRow(t, tg, "r", 6, "")
			require.NoError(t, tg.check(ctx, "r", 6), "and lands again, as Check always did")
			err = tg.checkLease(ctx, "r", aegis.Lease{Key: "k", Token: 6, Owner: ownerA}, "")
			requireStale(t, err, `resource "r" accepted token 6 through fence.Check, which records no owner: CheckLease cannot show it is the same holder`)
			requireRow(t, tg, "r", 6, "")

			require.NoError(t, tg.checkLease(ctx, "r", aegis.Lease{Key: "k", Token: 7, Owner: ownerB}, ""), "a greater lease token lands over a bare one")
			requireRow(t, tg, "r", 7, ownerB)
		})
	}
}

// v1SQL is the fence table as version 1 created it, as released.
const v1SQL = `CREATE TABLE IF NOT EXISTS aegis_fence (
	resource text   PRIMARY KEY,
	token    bigint NOT NULL
)`

// TestMigrateFromV1: a fence table created by version 1, with rows, is
// upgraded in place by Migrate; until then the checks say to run it, and
// after it the old rows keep fencing. The pgx target's table is made by
// hand, as version 1's table in docs/design.md section 5, with no
// migration recorded.
func TestMigrateFromV1(t *testing.T) {
	t.Parallel()
	for _, tg := range newTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			if tg.db == nil {
				require.NoError(t, tg.exec(ctx, "create table aegis_fence (resource text primary key, token bigint not null)"))
			} else {
				require.NoError(t, applyV1(ctx, tg.db))
			}
			require.NoError(t, tg.exec(ctx, "INSERT INTO aegis_fence (resource, token) VALUES ('old', 7)"))

			for _, err := range []error{
				tg.check(ctx, "old", 7),
				tg.checkLease(ctx, "old", aegis.Lease{Token: 8, Owner: ownerA}, ""),
			} {
				require.ErrorContains(t, err, "table aegis_fence has no owner_hash column (schema version 1): run fence.Migrate")
				require.NotErrorIs(t, err, aegis.ErrStale)
				require.NotContains(t, err.Error(), ownerA)
			}

			require.NoError(t, tg.migrate(ctx))
			require.NoError(t, tg.migrate(ctx), "Migrate is idempotent at version 2")
			requireRow(t, tg, "old", 7, "")
			require.NoError(t, tg.check(ctx, "old", 7), "the old row's token still lands bare")
			requireStale(t, tg.check(ctx, "old", 6), "a token greater than 6")
			requireStale(t, tg.checkLease(ctx, "old", aegis.Lease{Token: 7, Owner: ownerA}, ""), "through fence.Check, which records no owner")
			require.NoError(t, tg.checkLease(ctx, "old", aegis.Lease{Token: 8, Owner: ownerA}, ""))
			requireRow(t, tg, "old", 8, ownerA)
			require.NoError(t, tg.checkLease(ctx, "new", aegis.Lease{Token: 1, Owner: ownerB}, ""))
			requireRow(t, tg, "new", 1, ownerB)
		})
	}
}

// applyV1 applies the fence's version 1 the way a release of version 1
// did, recording it in aegis_migrations.
func applyV1(ctx context.Context, db *sql.DB) error {
	d, err := migrate.Detect(ctx, db)
	if err != nil {
		return err
	}
	return migrate.Apply(ctx, db, d, "fence", []migrate.Migration{{Version: 1, SQL: v1SQL}})
}

// TestCheckLeaseInvalid: each bad argument is refused before any SQL is
// sent, naming what is wrong and never the owner. As in TestCheckInvalid,
// the schema has no fence table, so a statement that reached the server
// would fail otherwise and abort the PostgreSQL transaction.
func TestCheckLeaseInvalid(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	sqlite, err := sqlitelease.Open(filepath.Join(t.TempDir(), "fence.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	dbs := map[string]*sql.DB{"postgres": testenv.PostgresSQL(t), "sqlite": sqlite}

	type invalid struct {
		name     string
		resource string
		lease    aegis.Lease
		want     string
	}
	cases := []invalid{
		{"empty owner", "r", aegis.Lease{Key: "jobs/nightly", Token: 3}, `lease "jobs/nightly" token 3 has no owner`},
		{"zero lease", "r", aegis.Lease{}, "token 0 is not positive"},
	}
	for _, tc := range invalidChecks {
		cases = append(cases, invalid{tc.name, tc.resource, aegis.Lease{Key: "k", Token: tc.token, Owner: ownerA}, tc.want})
	}
	requireInvalid := func(t *testing.T, err error, want string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, want)
		require.NotContains(t, err.Error(), ownerA)
		locktest.RequireHidden(t, ownerA, err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				requireInvalid(t, fence.CheckLease(ctx, tx, tc.resource, tc.lease), tc.want)
				_, err := tx.Exec(ctx, "SELECT 1")
				return err
			})
			require.NoError(t, err, "the refused check sent nothing: the transaction is intact")
			for name, db := range dbs {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err, name)
				requireInvalid(t, fence.CheckLeaseSQL(ctx, tx, tc.resource, tc.lease), tc.want)
				_, err = tx.ExecContext(ctx, "SELECT 1")
				require.NoError(t, err, "%s: the transaction is intact", name)
				require.NoError(t, tx.Rollback())
			}
		})
	}
	t.Run("nil tx", func(t *testing.T) {
		l := aegis.Lease{Token: 1, Owner: ownerA}
		requireInvalid(t, fence.CheckLease(t.Context(), nil, "r", l), "fence: check lease: tx is nil")
		requireInvalid(t, fence.CheckLeaseSQL(t.Context(), nil, "r", l), "fence: check lease: tx is nil")
	})
	t.Run("missing table", func(t *testing.T) {
		for _, tg := range newTargets(t) {
			err := tg.checkLease(t.Context(), "r", aegis.Lease{Token: 1, Owner: ownerA}, "")
			require.ErrorContains(t, err, "table aegis_fence does not exist: run fence.Migrate", tg.name)
			require.NotContains(t, err.Error(), ownerA)
		}
	})
}
