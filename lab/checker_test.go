package lab

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCheckHistory(t *testing.T) {
	t.Parallel()
	// a builds an attempt on node n, token tok, read r, over [call, ret].
	a := func(n int, tok, r int64, o Outcome, call, ret int64) Attempt {
		return Attempt{Node: n, Token: tok, Read: r, Outcome: o, Call: call, Return: ret, client: n}
	}
	tests := []struct {
		name     string
		fenced   bool
		attempts []Attempt
		want     string
	}{
		{"sequential increments", true, []Attempt{
			a(1, 1, 0, Committed, 0, 10), a(2, 2, 1, Committed, 20, 30), a(3, 3, 2, Committed, 40, 50),
		}, CheckOK},
		{"two holders read 0 and both commit 1", false, []Attempt{
			a(1, 1, 0, Committed, 0, 100), a(2, 2, 0, Committed, 10, 50),
		}, CheckViolation},
		{"the paused holder is refused after a greater token", true, []Attempt{
			a(1, 7, 0, Refused, 0, 100), a(2, 8, 0, Committed, 10, 50),
		}, CheckOK},
		{"a refusal with no greater token is a violation", true, []Attempt{
			a(1, 7, 0, Committed, 0, 10), a(2, 8, 1, Refused, 20, 30),
		}, CheckViolation},
		{"a lower token committed after a greater one is a violation", true, []Attempt{
			a(2, 8, 0, Committed, 0, 10), a(1, 7, 1, Committed, 20, 30),
		}, CheckViolation},
		{"a killed holder may have presented its token", true, []Attempt{
			a(1, 9, 0, Unknown, 0, math.MaxInt64), a(2, 8, 0, Refused, 20, 30), a(3, 10, 0, Committed, 40, 50),
		}, CheckOK},
		{"unfenced, a late stale write lands on later ones: lost updates", false, []Attempt{
			a(1, 1, 0, Committed, 0, 100), a(2, 2, 0, Committed, 10, 20), a(3, 3, 1, Committed, 30, 40),
		}, CheckViolation},
		{"an empty history", true, nil, CheckOK},
	}
	for _, tt := range tests {
		got, err := CheckHistory(tt.attempts, tt.fenced, 10*time.Second, "")
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, got, tt.name)
	}
}

func TestCheckHistoryVisualisation(t *testing.T) {
	t.Parallel()
	html := filepath.Join(t.TempDir(), "v.html")
	got, err := CheckHistory([]Attempt{
		{Node: 1, Token: 1, Read: 0, Outcome: Committed, Call: 0, Return: 100, client: 0},
		{Node: 2, Token: 2, Read: 0, Outcome: Committed, Call: 10, Return: 50, client: 1},
	}, false, 10*time.Second, html)
	require.NoError(t, err)
	require.Equal(t, CheckViolation, got)
	b, err := os.ReadFile(html)
	require.NoError(t, err)
	require.Contains(t, string(b), "node2 token 2: read 0, committed")
}
