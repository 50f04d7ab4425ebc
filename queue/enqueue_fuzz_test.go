package queue

import (
	"cmp"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

// fuzzArgs are args whose kind and JSON the fuzzer chooses.
type fuzzArgs struct {
	kind string
	json []byte
}

func (a fuzzArgs) Kind() string                 { return a.kind }
func (a fuzzArgs) MarshalJSON() ([]byte, error) { return a.json, nil }

// FuzzEnqueue enqueues a job of a fuzzed kind, queue, unique key and args
// on a real PostgreSQL: Enqueue refuses it with an error that wraps
// aegis.ErrInvalid, or the job reads back with what was enqueued (the
// args as JSON). Nothing else: no server error, no panic.
func FuzzEnqueue(f *testing.F) {
	for _, s := range [][4]string{
		{"email", "", "", `{"to":"a@example.com"}`},
		{"export", "billing", "tick/2026-10-01T02:00", `[1, 2.50, "x", null, true, {"a": {"b": 1e3}}]`},
		{"é/€ kind", "queue with spaces", "", `"<b>&</b>"`},
		{" kind", "q", "", `{}`},
		{"kind", "q\x00", "", `{}`},
		{"kind", "q", "k\xff", `{}`},
		{"kind", "", "", `{"a":1,"a":2}`},
		{"kind", "", "", `{"a":`},
		{"kind", "", "", ``},
		{"kind", "", "", `-0.0e-0`},
		{strings.Repeat("k", MaxKindLen+1), "", "", `1`},
	} {
		f.Add(s[0], s[1], s[2], []byte(s[3]))
	}
	p := pool(f)
	c := client(f, p, nil)
	f.Fuzz(func(t *testing.T, kind, queue, key string, args []byte) {
		ctx := t.Context()
		res, err := c.Enqueue(ctx, fuzzArgs{kind: kind, json: args}, &EnqueueOpts{Queue: queue, UniqueKey: key})
		if err != nil {
			require.ErrorIs(t, err, aegis.ErrInvalid, "Enqueue(kind %q, queue %q, key %q, args %q)", kind, queue, key, args)
			return
		}
		if res.Duplicate {
			require.Equal(t, key, res.Job.UniqueKey, "the live job that holds the key")
			return
		}
		j, err := c.Job(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Equal(t, kind, j.Kind)
		require.Equal(t, cmp.Or(queue, DefaultQueue), j.Queue)
		require.Equal(t, key, j.UniqueKey)
		same, err := testenv.SameJSON(args, j.EncodedArgs)
		require.NoError(t, err, "accepted args are JSON")
		require.True(t, same, "the args %q read back as %q", args, j.EncodedArgs)
		require.True(t, json.Valid(j.EncodedArgs))
	})
}
