package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// FuzzRunRequest decodes a fuzzed body of POST /api/groups: it is refused
// with a message, or it is a scenario whose every run is a valid Config;
// a requested run sent again as the page sends it (its report's config)
// decodes to the same Config; and the catalog (SQLite, as a run's nodes
// use it) takes every schedule of the run, those its edits add or change
// included: a run the dashboard accepts does not fail at its first put.
func FuzzRunRequest(f *testing.F) {
	for _, body := range []string{
		`{"scenario":"invoice-export"}`,
		`{"runs":[{"strategy":"pg-lease"}]}`,
		`{"runs":[{"strategy":"pg-lease","fence":false,"nodes":5,"duration":"10s","tick":"500ms","work":"100ms","ttl":"1s","chaos":["pause:holder@2s+3s","skew:node2=-300ms"]}]}`,
		`{"runs":[{"strategy":"queue","catalog":"a=1s/300ms,b=3s/4s/no-keep-alive","chaos":["edit:a@2s=2s","edit:c@1s=2s/1s","edit:b@3s=pause"]}]}`,
		`{"runs":[{"strategy":"none","chaos":["edit:invoice-export@1s=9000h"]}]}`,
		`{"runs":[{"strategy":"none"}],"scenario":"aegis"}`,
		`{"runs":[{"strategy":"none","extra":1}]}`,
		`{"runs":[{"strategy":"none"}]} {}`,
		`{"runs":[`,
		``,
	} {
		f.Add([]byte(body))
	}
	ctx := context.Background()
	db, err := sqlitelease.Open(filepath.Join(f.TempDir(), "catalog.db"))
	require.NoError(f, err)
	f.Cleanup(func() { db.Close() })
	cat, err := schedule.NewCatalog(ctx, db, nil)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, body []byte) {
		var q GroupRequest
		if err := decode(bytes.NewReader(body), &q); err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		sc, err := q.configs()
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotEmpty(t, sc.Runs)
		for _, c := range sc.Runs {
			require.NoError(t, c.Validate(), "an accepted run is valid")
			if q.Scenario == "" {
				again := resend(t, c)
				c.Catalog = c.Jobs()
				require.Equal(t, c, again, "the run sent again as its report's config")
			}
			for _, e := range entries(c) {
				_, err := cat.Put(ctx, e)
				require.NoError(t, err, "%s: the catalog takes %s", c, e.Spec())
			}
		}
	})
}

// resend is c as the page sends a run again: its report's config.
func resend(t *testing.T, c lab.Config) lab.Config {
	cj := c.JSON()
	body, err := json.Marshal(GroupRequest{Runs: []RunRequest{{
		Strategy: cj.Strategy, Fence: &cj.Fence, Nodes: &cj.Nodes, Duration: cj.Duration, Tick: cj.Tick,
		Work: cj.Work, TTL: cj.TTL, Chaos: cj.Chaos, Catalog: cj.Catalog,
	}}})
	require.NoError(t, err)
	var q GroupRequest
	require.NoError(t, decode(bytes.NewReader(body), &q), "%s", body)
	sc, err := q.configs()
	require.NoError(t, err, "%s", body)
	require.Len(t, sc.Runs, 1)
	return sc.Runs[0]
}

// entries are the catalog rows a run of c puts: its jobs', the jobs its
// edits add, and its jobs with the cadences its edits give them.
func entries(c lab.Config) []schedule.Entry {
	var out []schedule.Entry
	for _, j := range c.Jobs() {
		out = append(out, j.Entry(c))
	}
	for _, ch := range c.Chaos {
		if j, ok := ch.Added(); ok {
			out = append(out, j.Entry(c))
			continue
		}
		if ch.Kind != lab.Edit || ch.Offset == 0 {
			continue
		}
		for _, j := range c.Jobs() {
			if j.Name == ch.Target {
				e := j.Entry(c)
				e.Every = ch.Offset
				out = append(out, e)
			}
		}
	}
	return out
}
