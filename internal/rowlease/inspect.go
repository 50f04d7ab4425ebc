package rowlease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/aegislab/aegis"
)

// Key is a key's row of a lease table as an operator reads it. The owner
// (who may renew or release) is a secret and is never read.
type Key struct {
	Key string
	// Holder is the name the granting process gave (Config.Holder): empty
	// for a grant made before holder names, or on a table created before
	// the column.
	Holder string
	Token  aegis.Token
	// Granted and Expires are the store's times of the last grant and of
	// its expiry. A released key's expiry is the Unix epoch (it is
	// -infinity in PostgreSQL, which database/sql cannot scan, and 0 in
	// SQLite).
	Granted, Expires time.Time
	// Released tells that the last holder released the key (Expires is
	// the epoch) rather than letting it run out.
	Released bool
}

// Grant is a grant of a key recorded in the grant history (Config.History).
type Grant struct {
	Token   aegis.Token
	Holder  string
	Granted time.Time
}

// ReadStatements are a lease table's reads, for a Reader. In Keys and Key,
// %[1]s is the holder column: holder, or an empty string literal on a
// table created before it. Times are timestamps, or Unix milliseconds when Millis is set.
type ReadStatements struct {
	// Tables returns three booleans: the lease table is there, the grant
	// history is there, the lease table has the holder column.
	Tables string
	// Keys reads every key, ordered by key, at most $1; Key reads key $1.
	// Columns: key, holder, token, granted, expires.
	Keys, Key string
	// Grants reads key $1's recorded grants, the newest first, at most
	// $2. Columns: token, holder, granted.
	Grants string
	Millis bool
}

// Reader reads a lease table and its grant history for an operator with a
// backend's statements. It creates nothing; it is safe for concurrent use.
type Reader struct {
	DB *sql.DB
	ReadStatements
	// Args are the arguments of the Tables statement.
	Args []any
}

// Tables tells whether the lease table and the grant history are there.
func (r *Reader) Tables(ctx context.Context) (lease, history bool, err error) {
	lease, history, _, err = r.tables(ctx)
	return lease, history, err
}

func (r *Reader) tables(ctx context.Context) (lease, history, holder bool, err error) {
	if err := r.DB.QueryRowContext(ctx, r.ReadStatements.Tables, r.Args...).Scan(&lease, &history, &holder); err != nil {
		return false, false, false, fmt.Errorf("look for the lease tables: %w", err)
	}
	return lease, history, holder, nil
}

// Keys reads the lease table: every key, by key, at most limit.
func (r *Reader) Keys(ctx context.Context, limit int) ([]Key, error) {
	return r.keys(ctx, r.ReadStatements.Keys, limit)
}

// Key reads key's row; ok is false when the table has none.
func (r *Reader) Key(ctx context.Context, key string) (k Key, ok bool, err error) {
	ks, err := r.keys(ctx, r.ReadStatements.Key, key)
	if err != nil || len(ks) == 0 {
		return Key{}, false, err
	}
	return ks[0], true, nil
}

func (r *Reader) keys(ctx context.Context, stmt string, arg any) ([]Key, error) {
	// An older table has no holder column: its keys have no holder
	// rather than failing.
	lease, _, holder, err := r.tables(ctx)
	if err != nil {
		return nil, err
	}
	if !lease {
		return nil, errors.New("read the lease table: it does not exist")
	}
	h := "''"
	if holder {
		h = "holder"
	}
	rows, err := r.DB.QueryContext(ctx, fmt.Sprintf(stmt, h), arg)
	if err != nil {
		return nil, fmt.Errorf("read the lease table: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		var k Key
		var token int64
		if r.Millis {
			var g, e int64
			if err := rows.Scan(&k.Key, &k.Holder, &token, &g, &e); err != nil {
				return nil, fmt.Errorf("read the lease table: %w", err)
			}
			k.Granted, k.Expires = time.UnixMilli(g), time.UnixMilli(e)
		} else if err := rows.Scan(&k.Key, &k.Holder, &token, &k.Granted, &k.Expires); err != nil {
			return nil, fmt.Errorf("read the lease table: %w", err)
		}
		k.Token = aegis.Token(token)
		k.Released = !k.Expires.After(time.Unix(0, 0))
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the lease table: %w", err)
	}
	return out, nil
}

// Grants reads key's recorded grants, the newest first, at most limit.
func (r *Reader) Grants(ctx context.Context, key string, limit int) ([]Grant, error) {
	rows, err := r.DB.QueryContext(ctx, r.ReadStatements.Grants, key, limit)
	if err != nil {
		return nil, fmt.Errorf("read the grant history: %w", err)
	}
	defer rows.Close()
	var out []Grant
	for rows.Next() {
		var g Grant
		var token int64
		if r.Millis {
			var ms int64
			if err := rows.Scan(&token, &g.Holder, &ms); err != nil {
				return nil, fmt.Errorf("read the grant history: %w", err)
			}
			g.Granted = time.UnixMilli(ms)
		} else if err := rows.Scan(&token, &g.Holder, &g.Granted); err != nil {
			return nil, fmt.Errorf("read the grant history: %w", err)
		}
		g.Token = aegis.Token(token)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the grant history: %w", err)
	}
	return out, nil
}
