package backend

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

func openMemory(context.Context, Servers) (aegis.Locker, func(), error) {
	return memlease.New(), func() {}, nil
}

func openPostgres(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	pool, err := pgxpool.New(ctx, s.PostgresURL)
	if err != nil {
		return nil, nil, PostgresError("postgres: open", s.PostgresURL, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, PostgresError("postgres: connect to", s.PostgresURL, err)
	}
	l, err := pglease.New(pool, &pglease.Config{History: s.LeaseHistory, Holder: s.LeaseHolder})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return l, pool.Close, nil
}

func openSQLite(ctx context.Context, s Servers) (aegis.Locker, func(), error) {
	db, err := sqlitelease.Open(s.SQLitePath)
	if err != nil {
		return nil, nil, err
	}
	l, err := sqlitelease.New(db, &sqlitelease.Config{History: s.LeaseHistory, Holder: s.LeaseHolder})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return l, func() { db.Close() }, nil
}
