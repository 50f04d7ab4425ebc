package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/testing/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv("NIGHTLY_REPLICA") != "" {
		os.Exit(replicaMain()) // a replica process started by the demo
	}
	goleak.VerifyTestMain(m)
}

// MID-032-LAB1's acceptance: three replica processes; the holder is paused
// (SIGSTOP) past its lease, another instance runs, the first resumes
// (SIGCONT); no change is applied twice. Without the fence the same story
// applies orders twice: the test can fail.
func TestPausedHolderAppliesNothingTwice(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced", false: "unfenced"}[fenced], func(t *testing.T) {
			t.Parallel()
			testenv.Reserve(t, 1, "the demo's three replicas")
			var out bytes.Buffer
			args := []string{"-postgres", testenv.PostgresURL(t), "-schema", ""}
			if !fenced {
				args = append(args, "-fence=false")
			}
			res, err := demo(t.Context(), args, &out)
			t.Log("\n" + out.String())
			require.NoError(t, err)
			require.Equal(t, 10, res.Orders, "every order reconciled")
			// Both attempts of the one tick are on record: the paused
			// runner's, refused when it ended, and the reclaimer's.
			require.Len(t, res.Attempts, 2, "%+v", res.Attempts)
			last, first := res.Attempts[0], res.Attempts[1]
			require.Equal(t, first.Fire, last.Fire)
			require.Equal(t, res.Runner, first.Node)
			require.Equal(t, res.RunnerToken, int64(first.Token))
			require.Equal(t, 1, first.Attempt)
			require.Equal(t, "refused", first.Outcome, "%+v", first)
			require.Equal(t, res.Reclaimer, last.Node)
			require.Equal(t, res.ReclaimToken, int64(last.Token))
			require.Equal(t, 2, last.Attempt)
			require.Equal(t, "succeeded", last.Outcome, "%+v", last)
			if fenced {
				require.Zero(t, res.Duplicates, "no order applied twice")
				require.Equal(t, 10, res.Ledger)
				require.True(t, res.Stale, "the resumed replica's write was rejected by the fence")
				require.Contains(t, out.String(), "SIGSTOP")
				require.Contains(t, out.String(), "reaper: the run of")
			} else {
				require.NotZero(t, res.Duplicates, "without the fence the resumed replica applies again")
			}
		})
	}
}

func TestRejectsBadFlags(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, run(t.Context(), []string{"-work", "0s"}, io.Discard), "must be positive")
	require.Error(t, run(t.Context(), []string{"-nope"}, io.Discard))
}

// The command the demo prints never carries a password: in the URL's
// user information or its password parameter it is masked, and a
// connection string that is not a URL is not printed.
func TestConsoleCommandMasksThePassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"postgres://aegis@127.0.0.1:15432/aegis?search_path=aegis_nightly_demo&sslmode=disable",
			"go run ./cmd/aegis console --store 'postgres://aegis@127.0.0.1:15432/aegis?search_path=aegis_nightly_demo&sslmode=disable'"},
		{"postgres://aegis:s3cret@db:5432/aegis?search_path=aegis_nightly_demo",
			"go run ./cmd/aegis console --store 'postgres://aegis:xxxxx@db:5432/aegis?search_path=aegis_nightly_demo'"},
		{"postgresql://aegis@db/aegis?password=s3cret&search_path=s",
			"go run ./cmd/aegis console --store 'postgresql://aegis@db/aegis?password=xxxxx&search_path=s'"},
		{"host=db user=aegis password=s3cret dbname=aegis",
			"go run ./cmd/aegis console --store URL   # URL: this database's postgres:// URL, with search_path set to the demo's schema"},
		{"postgres://a@db/aegis?application_name=o'neil", `go run ./cmd/aegis console --store 'postgres://a@db/aegis?application_name=o'\''neil'`},
	} {
		got := consoleCommand(c.in)
		require.Equal(t, c.want, got, c.in)
		require.NotContains(t, got, "s3cret")
	}
	require.True(t, masked("postgres://a:b@db/x"))
	require.True(t, masked("postgres://a@db/x?password=b"))
	require.False(t, masked("postgres://a@db/x"))
}
