package queue

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

type mapArgs map[string]string

func (mapArgs) Kind() string { return "map" }

// rawArgs marshals to its JSON text as it is: what a type with a
// MarshalJSON of its own can hand the queue.
type rawArgs string

func (rawArgs) Kind() string                   { return "raw" }
func (r rawArgs) MarshalJSON() ([]byte, error) { return []byte(r), nil }

type kindArgs string

func (k kindArgs) Kind() string { return string(k) }

// TestEnqueueArgsCheckedBeforeSQL: args PostgreSQL's jsonb would refuse (a
// NUL, in a value or a key; a lone surrogate) and args over MaxArgsLen are
// refused by every enqueue variant with an error that wraps
// aegis.ErrInvalid and names the job's kind and what is wrong, before any
// SQL: nothing is written, and the caller's transaction is still usable.
// So are bad kinds. Args of exactly MaxArgsLen bytes are taken.
func TestEnqueueArgsCheckedBeforeSQL(t *testing.T) {
	t.Parallel()
	p := pool(t)
	ctx := t.Context()
	c := client(t, p, nil) // enqueue-only: any kind may be enqueued
	huge := otherArgs{S: strings.Repeat("x", 10<<20)}
	tests := []struct {
		name string
		args Args
		want string
	}{
		{"NUL in a value", otherArgs{S: "a\x00b"}, `enqueue "other": the args' JSON holds \u0000 (a NUL), which PostgreSQL's jsonb cannot store`},
		{"NUL in a key", mapArgs{"k\x00": "v"}, `enqueue "map": the args' JSON holds \u0000 (a NUL)`},
		{"escaped NUL", rawArgs(`{"a":["\u0000"]}`), `enqueue "raw": the args' JSON holds \u0000 (a NUL)`},
		{"lone high surrogate", rawArgs(`{"a":"\ud800x"}`), `enqueue "raw": the args' JSON holds \ud800, half of a surrogate pair`},
		{"lone low surrogate", rawArgs(`"\uDC00"`), `enqueue "raw": the args' JSON holds \udc00, half of a surrogate pair`},
		{"10 MB", huge, `enqueue "other": the args are 10485768 bytes of JSON, more than MaxArgsLen (1048576)`},
		{"NUL kind", kindArgs("a\x00b"), `kind "a\x00b" contains a NUL byte`},
		{"bad UTF-8 kind", kindArgs("\xff"), `kind "\xff" is not valid UTF-8`},
		{"long kind", kindArgs(strings.Repeat("k", MaxKindLen+1)), "is 201 bytes, more than 200"},
		{"empty kind", kindArgs(""), "kind is empty"},
	}
	// Each variant, in a transaction of the test's where it takes one:
	// after a refusal the transaction must still run a statement, which
	// it would not had the refused job reached the server.
	variants := map[string]func(tx pgx.Tx, args Args) error{
		"Enqueue":   func(_ pgx.Tx, args Args) error { _, err := c.Enqueue(ctx, args, nil); return err },
		"EnqueueTx": func(tx pgx.Tx, args Args) error { _, err := c.EnqueueTx(ctx, tx, args, nil); return err },
		"EnqueueMany": func(_ pgx.Tx, args Args) error {
			_, err := c.EnqueueMany(ctx, []EnqueueParams{{Args: testArgs{}}, {Args: args}})
			return err
		},
		"EnqueueManyTx": func(tx pgx.Tx, args Args) error {
			_, err := c.EnqueueManyTx(ctx, tx, []EnqueueParams{{Args: testArgs{}}, {Args: args, Opts: &EnqueueOpts{UniqueKey: "u"}}})
			return err
		},
	}
	for vname, enqueue := range variants {
		for _, tt := range tests {
			tx, err := p.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // also when an assertion fails
			err = enqueue(tx, tt.args)
			require.ErrorIs(t, err, aegis.ErrInvalid, "%s: %s", vname, tt.name)
			require.ErrorContains(t, err, tt.want, "%s: %s", vname, tt.name)
			_, err = tx.Exec(ctx, "SELECT 1")
			require.NoError(t, err, "%s: %s: the transaction is intact", vname, tt.name)
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	require.Equal(t, 0, count(t, p, `SELECT count(*) FROM aegis_job`), "nothing was written")

	fill := MaxArgsLen - len(`{"s":""}`)
	exact := otherArgs{S: strings.Repeat("x", fill)}
	encoded, err := json.Marshal(exact)
	require.NoError(t, err)
	require.Len(t, encoded, MaxArgsLen)
	res, err := c.Enqueue(ctx, exact, nil)
	require.NoError(t, err, "args of exactly MaxArgsLen bytes")
	require.Equal(t, fill, len(stored(t, p, res.Job.ID).EncodedArgs)-len(`{"s": ""}`))
	_, err = c.Enqueue(context.WithoutCancel(ctx), otherArgs{S: "ok \u00e9 \U0001F600"}, nil)
	require.NoError(t, err, "other escapes and characters are fine")
}

func TestStorable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a":"b"}`:                  "",
		`"\\u0000"`:                  "", // an escaped backslash, then the text u0000
		`"\\\u0000"`:                 `\u0000 (a NUL)`,
		`"\u0001\u00e9\uD83D\ude00"`: "",
		`{"\u0000":1}`:               `\u0000 (a NUL)`,
		`"\ud83d"`:                   `\ud83d, half of a surrogate pair`,
		`"\ud83d\u0041"`:             `\ud83d, half of a surrogate pair`,
		`["\ude00"]`:                 `\ude00, half of a surrogate pair`,
	} {
		err := storable([]byte(in))
		if want == "" {
			require.NoError(t, err, in)
		} else {
			require.EqualError(t, err, want, in)
		}
	}
}
