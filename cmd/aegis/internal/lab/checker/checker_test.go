package checker_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/checker"
)

// histBuilder builds one job's history, one op at a time, with explicit
// call and return times (porcupine's intervals are closed: ops that touch
// overlap). An op's owner is its node's ("holder N"): two nodes are two
// holders.
type histBuilder struct {
	job    string
	fenced bool
	ops    []checker.Op
}

func (h *histBuilder) add(kind checker.OpKind, node int, tick, token, value int64, res checker.OpResult, call, ret int64) *histBuilder {
	h.ops = append(h.ops, checker.Op{
		Job: cmp.Or(h.job, "job"), Kind: kind, Node: node, Attempt: fmt.Sprintf("%d.1.%d", node, tick),
		Tick: tick, Token: token, Owner: fmt.Sprintf("holder %d", node), Fenced: h.fenced || kind == checker.OpClaim,
		Value: value, Result: res, Call: call, Return: ret,
	})
	return h
}

func (h *histBuilder) read(node int, tick, token, value int64, res checker.OpResult, call, ret int64) *histBuilder {
	return h.add(checker.OpRead, node, tick, token, value, res, call, ret)
}

func (h *histBuilder) write(node int, tick, token, value int64, res checker.OpResult, call, ret int64) *histBuilder {
	return h.add(checker.OpWrite, node, tick, token, value, res, call, ret)
}

func (h *histBuilder) claim(node int, tick, token int64, res checker.OpResult, call, ret int64) *histBuilder {
	return h.add(checker.OpClaim, node, tick, token, 0, res, call, ret)
}

const (
	opOK      = checker.OpOK
	opRefused = checker.OpRefused
	opUnknown = checker.OpUnknown
	never     = 0 // the Return of an op that never returned
)

// cleanJob is ten ticks one after another: node 1 holds token 1 for five of
// them (an equal token from its owner), then node 2 token 2.
func cleanJob(job string, fenced bool) []checker.Op {
	h := &histBuilder{job: job, fenced: fenced}
	for k := int64(0); k < 10; k++ {
		node, token, at := 1, int64(1), k*100
		if k >= 5 {
			node, token = 2, 2
		}
		h.read(node, 1000*(k+1), token, k, opOK, at, at+10).write(node, 1000*(k+1), token, k+1, opOK, at+20, at+30)
	}
	return h.ops
}

func TestCheckJobs(t *testing.T) {
	t.Parallel()
	fenced := func() *histBuilder { return &histBuilder{fenced: true} }
	unfenced := func() *histBuilder { return &histBuilder{} }
	// the sequential duplicate: node 2 reads what node 1 wrote for tick
	// 1000 and commits tick 1000 again; a valid counter history.
	seqDup := func(h *histBuilder) []checker.Op {
		return h.read(1, 1000, 1, 0, opOK, 0, 10).write(1, 1000, 1, 1, opOK, 20, 30).
			read(2, 1000, 2, 1, opOK, 40, 50).write(2, 1000, 2, 2, opOK, 60, 70).ops
	}
	// the cascade: A registers 5, B 6, A refused; C registers 7, B
	// refused, C commits.
	cascade := fenced().read(1, 1000, 5, 0, opOK, 0, 10).read(2, 1000, 6, 0, opOK, 20, 30).
		write(1, 1000, 5, 1, opRefused, 40, 50).read(3, 1000, 7, 0, opOK, 60, 70).
		write(2, 1000, 6, 1, opRefused, 80, 90).write(3, 1000, 7, 1, opOK, 100, 110).ops
	// two holders granted token 1 (a failover sent the counter back) both
	// commit, on different ticks, the ledger consistent.
	twoOwners := fenced().read(1, 1000, 1, 0, opOK, 0, 10).write(1, 1000, 1, 1, opOK, 20, 30).
		read(2, 2000, 1, 1, opOK, 40, 50).write(2, 2000, 1, 2, opOK, 60, 70).ops
	// node 1 reads for tick 1000, node 2 reads the same value and commits
	// tick 2000, then node 1's write lands (or is refused).
	lostAcross := func(h *histBuilder, last checker.OpResult) []checker.Op {
		return h.read(1, 1000, 1, 0, opOK, 0, 10).read(2, 2000, 2, 0, opOK, 20, 30).
			write(2, 2000, 2, 1, opOK, 40, 50).write(1, 1000, 1, 1, last, 60, 70).ops
	}
	// node 1 is killed inside its write: it may or may not have landed.
	killed := func(next int64) []checker.Op {
		return fenced().read(1, 1000, 1, 0, opOK, 0, 10).write(1, 1000, 1, 1, opUnknown, 20, never).
			read(2, 2000, 2, next, opOK, 40, 50).write(2, 2000, 2, next+1, opOK, 60, 70).ops
	}
	tests := []struct {
		name   string
		rule   checker.FenceRule
		ops    []checker.Op
		want   string
		reason string // a pattern the violation's reason matches
	}{
		{"clean, fenced", checker.FenceOwner, cleanJob("job", true), checker.CheckOK, ""},
		{"clean, unfenced", checker.FenceNone, cleanJob("job", false), checker.CheckOK, ""},
		{"clean, unfenced ops under an owner fence", checker.FenceOwner, cleanJob("job", false), checker.CheckOK, ""},
		{"an empty history", checker.FenceOwner, nil, "", ""},

		{"the sequential duplicate, unfenced", checker.FenceNone, seqDup(unfenced()), checker.CheckViolation, `^tick 1000 applied twice \(node 2's write 2`},
		{"the sequential duplicate, fenced: the tokens were in order", checker.FenceOwner, seqDup(fenced()), checker.CheckViolation, `^tick 1000 applied twice`},

		{"an overlapping duplicate, unfenced", checker.FenceNone, unfenced().read(1, 1000, 1, 0, opOK, 0, 10).read(2, 1000, 2, 0, opOK, 5, 15).
			write(1, 1000, 1, 1, opOK, 20, 30).write(2, 1000, 2, 1, opOK, 25, 35).ops, checker.CheckViolation, `^(tick 1000 applied twice|lost update)`},

		{"the cascade, owner rule", checker.FenceOwner, cascade, checker.CheckOK, ""},
		{"the cascade, token rule", checker.FenceToken, cascade, checker.CheckOK, ""},
		{"the cascade with a refusal overlapping its cause", checker.FenceOwner, fenced().read(1, 1000, 5, 0, opOK, 0, 10).
			read(2, 1000, 6, 0, opOK, 20, 60).write(1, 1000, 5, 1, opRefused, 40, 50).write(2, 1000, 6, 1, opOK, 70, 80).ops, checker.CheckOK, ""},
		{"the optimistic cascade: claims register", checker.FenceToken, fenced().claim(1, 1000, 5, opOK, 0, 10).read(1, 1000, 5, 0, opOK, 20, 30).
			claim(2, 2000, 6, opOK, 40, 50).read(2, 2000, 6, 0, opOK, 60, 70).write(2, 2000, 6, 1, opOK, 80, 90).
			write(1, 1000, 5, 1, opRefused, 100, 110).ops, checker.CheckOK, ""},
		{"a killed claim may have registered", checker.FenceToken, fenced().claim(1, 1000, 6, opUnknown, 0, never).
			read(2, 2000, 5, 0, opRefused, 20, 30).ops, checker.CheckOK, ""},
		{"a claim of a lower token", checker.FenceToken, fenced().claim(1, 1000, 6, opOK, 0, 10).claim(2, 2000, 5, opOK, 20, 30).ops,
			checker.CheckViolation, `^token 5 accepted after 6`},

		{"the equal token from two holders, owner rule", checker.FenceOwner, twoOwners, checker.CheckViolation, `^token 1 accepted from two owners \(node 2's read 1`},
		{"the equal token from two holders, token rule", checker.FenceToken, twoOwners, checker.CheckOK, ""},

		{"a lower token accepted after a greater one", checker.FenceToken, fenced().read(2, 1000, 8, 0, opOK, 0, 10).write(2, 1000, 8, 1, opOK, 20, 30).
			read(1, 2000, 7, 1, opOK, 40, 50).write(1, 2000, 7, 2, opOK, 60, 70).ops, checker.CheckViolation, `^token 7 accepted after 8 \(node 1's read`},
		{"a lower token's write accepted after a greater read", checker.FenceToken, fenced().read(1, 1000, 7, 0, opOK, 0, 10).
			read(2, 2000, 8, 0, opOK, 20, 30).write(1, 1000, 7, 1, opOK, 40, 50).ops, checker.CheckViolation, `^token 7 accepted after 8 \(node 1's write`},

		{"a lost update across ticks, unfenced", checker.FenceNone, lostAcross(unfenced(), opOK), checker.CheckViolation,
			`^lost update: write 1 after the ledger reached 1 \(node 1's write 1, tick 1000`},
		{"a lost update across ticks, fenced and refused", checker.FenceToken, lostAcross(fenced(), opRefused), checker.CheckOK, ""},

		{"a killed write whose effect is visible", checker.FenceOwner, killed(1), checker.CheckOK, ""},
		{"a killed write whose effect is not", checker.FenceOwner, killed(0), checker.CheckOK, ""},
		{"a killed write cannot hide the duplicate it enabled", checker.FenceOwner, fenced().read(1, 1000, 1, 0, opOK, 0, 10).
			write(1, 1000, 1, 1, opUnknown, 20, never).read(2, 1000, 2, 1, opOK, 40, 50).write(2, 1000, 2, 2, opOK, 60, 70).ops,
			checker.CheckViolation, `^tick 1000 applied twice`},
		{"a killed reader may have registered its token", checker.FenceOwner, fenced().read(1, 1000, 9, 0, opUnknown, 0, never).
			read(2, 1000, 8, 0, opRefused, 20, 30).read(3, 1000, 10, 0, opOK, 40, 50).write(3, 1000, 10, 1, opOK, 60, 70).ops, checker.CheckOK, ""},
		{"an error after a commit that landed", checker.FenceNone, unfenced().read(1, 1000, 0, 0, opOK, 0, 10).
			write(1, 1000, 0, 1, opUnknown, 20, 30).read(2, 2000, 0, 1, opOK, 40, 50).ops, checker.CheckOK, ""},
		{"an error after a commit, and a read that sees neither", checker.FenceNone, unfenced().read(1, 1000, 0, 0, opOK, 0, 10).
			write(1, 1000, 0, 1, opUnknown, 20, 30).read(2, 2000, 0, 2, opOK, 40, 50).ops, checker.CheckViolation, `^read 2 while the ledger held [01]`},

		{"a refusal nobody caused: the token was the greatest", checker.FenceToken, fenced().read(1, 1000, 5, 0, opOK, 0, 10).
			write(1, 1000, 5, 1, opOK, 20, 30).read(2, 2000, 7, 1, opRefused, 40, 50).ops, checker.CheckViolation, `^token 7 refused though the fence held 5 \(a refusal nobody caused\)`},
		{"a refusal nobody caused: nothing registered", checker.FenceOwner, fenced().read(1, 1000, 5, 0, opRefused, 0, 10).ops,
			checker.CheckViolation, `^token 5 refused though no token was registered`},
		{"an equal token refused from its own owner", checker.FenceOwner, fenced().read(1, 1000, 5, 0, opOK, 0, 10).
			write(1, 1000, 5, 1, opRefused, 20, 30).ops, checker.CheckViolation, `^token 5 refused though the fence held 5`},
		{"an equal token from another owner refused", checker.FenceOwner, fenced().read(1, 1000, 5, 0, opOK, 0, 10).
			read(2, 2000, 5, 0, opRefused, 20, 30).ops, checker.CheckOK, ""},
		{"an unfenced refusal (a unique key) changes nothing", checker.FenceNone, unfenced().read(1, 1000, 0, 0, opOK, 0, 10).
			write(1, 1000, 0, 1, opOK, 20, 30).read(2, 1000, 0, 1, opOK, 40, 50).write(2, 1000, 0, 2, opRefused, 60, 70).ops, checker.CheckOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := checker.CheckJobs(tt.ops, tt.rule, 10*time.Second, "")
			require.NoError(t, err)
			if tt.want == "" {
				require.Empty(t, v)
				return
			}
			require.Equal(t, []checker.JobVerdict{{Job: "job", Verdict: tt.want, Reason: v[0].Reason}}, v)
			if tt.reason == "" {
				require.Empty(t, v[0].Reason)
				return
			}
			require.Regexp(t, tt.reason, v[0].Reason)
		})
	}
}

func TestCheckJobsSeveralJobs(t *testing.T) {
	t.Parallel()
	dup := (&histBuilder{job: "nightly/export", fenced: true}).read(1, 1000, 1, 0, opOK, 0, 10).write(1, 1000, 1, 1, opOK, 20, 30).
		read(2, 1000, 2, 1, opOK, 40, 50).write(2, 1000, 2, 2, opOK, 60, 70).ops
	// interleaved, as a run records them
	var ops []checker.Op
	for i, op := range cleanJob("certificates", true) {
		ops = append(ops, op)
		if i < len(dup) {
			ops = append(ops, dup[i])
		}
	}
	dir := filepath.Join(t.TempDir(), "html")
	v, err := checker.CheckJobs(ops, checker.FenceOwner, 10*time.Second, dir)
	require.NoError(t, err)
	require.Len(t, v, 2)
	require.Equal(t, checker.JobVerdict{Job: "certificates", Verdict: checker.CheckOK}, v[0])
	require.Equal(t, "nightly/export", v[1].Job)
	require.Equal(t, checker.CheckViolation, v[1].Verdict)
	require.Regexp(t, `^tick 1000 applied twice`, v[1].Reason)
	require.Equal(t, filepath.Join(dir, "nightly_export.html"), v[1].HTML)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "one visualisation, for the violating job only")
	b, err := os.ReadFile(v[1].HTML)
	require.NoError(t, err)
	require.Contains(t, string(b), "node 2's write 2, tick 1000, token 2")
	// Its lanes carry the nodes' names (node1, node2), in the order of
	// porcupine's lanes (ClientId 0, 1).
	require.Contains(t, string(b), `const names = ["node1","node2"]`)
}

func TestCheckJobsTimeout(t *testing.T) {
	t.Parallel()
	// Forty reads all open at once, and one read no state explains:
	// porcupine tries every subset of the forty before it can say illegal
	// (2^40 of them), so it runs out of time, and the verdict says so
	// instead of ok.
	h := &histBuilder{}
	for i := range int64(40) {
		h.read(int(i+1), 1000, 0, 0, opOK, i, 1000)
	}
	h.read(41, 1000, 0, 5, opOK, 100, 200)
	start := time.Now()
	v, err := checker.CheckJobs(h.ops, checker.FenceNone, 50*time.Millisecond, "")
	require.NoError(t, err)
	require.Equal(t, []checker.JobVerdict{{Job: "job", Verdict: checker.CheckUnknown}}, v)
	require.Less(t, time.Since(start), 30*time.Second, "the timeout bounds the check")

	// Two committed writes of one tick are a violation in any order: the
	// verdict stands though the search runs out of time.
	h.write(42, 1000, 0, 1, opOK, 1300, 1310).write(43, 1000, 0, 2, opOK, 1320, 1330)
	dir := t.TempDir()
	v, err = checker.CheckJobs(h.ops, checker.FenceNone, 50*time.Millisecond, dir)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, checker.CheckViolation, v[0].Verdict)
	require.Regexp(t, `^tick 1000 applied twice \(node 43's write 2`, v[0].Reason)
	require.FileExists(t, v[0].HTML)
}

func TestCheckJobsInvalid(t *testing.T) {
	t.Parallel()
	good := checker.Op{Job: "j", Kind: checker.OpRead, Result: opOK, Call: 1, Return: 2}
	with := func(f func(*checker.Op)) []checker.Op { op := good; f(&op); return []checker.Op{good, op} }
	tests := []struct {
		name    string
		ops     []checker.Op
		rule    checker.FenceRule
		timeout time.Duration
		want    string
	}{
		{"rule", nil, "lease", time.Second, `fence rule "lease"`},
		{"timeout", nil, checker.FenceNone, 0, "timeout 0s"},
		{"job", with(func(o *checker.Op) { o.Job = "" }), checker.FenceNone, time.Second, `op 1 .*its Job is empty`},
		{"kind", with(func(o *checker.Op) { o.Kind = "delete" }), checker.FenceNone, time.Second, `op 1 .*its Kind "delete"`},
		{"result", with(func(o *checker.Op) { o.Result = "" }), checker.FenceNone, time.Second, `op 1 .*its Result ""`},
		{"return before call", with(func(o *checker.Op) { o.Return = -5 }), checker.FenceNone, time.Second, `op 1 .*its Return -5 is before its Call 1`},
		{"ok, never returned", with(func(o *checker.Op) { o.Return = 0 }), checker.FenceNone, time.Second, `op 1 .*its Result is "ok" but its Return is 0`},
	}
	for _, tt := range tests {
		_, err := checker.CheckJobs(tt.ops, tt.rule, tt.timeout, "")
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.name)
		require.Regexp(t, tt.want, err.Error(), tt.name)
	}

	// a directory that cannot be made is an error, not the caller's mistake
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := checker.CheckJobs([]checker.Op{good}, checker.FenceNone, time.Second, filepath.Join(file, "html"))
	require.Error(t, err)
	require.NotErrorIs(t, err, aegis.ErrInvalid)
}

// TestCheckJobsSimulated checks histories that a faithful simulation of
// the workload produces (a ledger, a fence under the rule, each operation
// taking effect at one instant inside its interval), seeded so every run is
// the same: the checker must call a job ok exactly when the simulation did
// no harm. With killed nodes it must still never flag a harmless job (a
// killed write that landed as a lost update can hide from the ledger: only
// the audit table shows it, so no assertion is made on those).
func TestCheckJobsSimulated(t *testing.T) {
	t.Parallel()
	verdicts := map[string]int{}
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 14))
		rule := []checker.FenceRule{checker.FenceNone, checker.FenceToken, checker.FenceOwner}[seed%3]
		kills := seed%2 == 1
		var ops []checker.Op
		harm := map[string]bool{}
		for j := range 3 {
			job := fmt.Sprintf("job%d", j)
			o, hurt := simulateJob(r, job, rule, kills)
			ops, harm[job] = append(ops, o...), hurt
		}
		start := time.Now()
		v, err := checker.CheckJobs(ops, rule, time.Minute, "")
		require.NoError(t, err)
		require.Less(t, time.Since(start), 20*time.Second, "seed %d: a run's history checks quickly", seed)
		for _, jv := range v {
			verdicts[fmt.Sprintf("%s harm %v", jv.Verdict, harm[jv.Job])]++
			name := fmt.Sprintf("seed %d rule %s kills %v %s", seed, rule, kills, jv.Job)
			switch {
			case !harm[jv.Job]:
				require.Equal(t, checker.CheckOK, jv.Verdict, "%s: %s", name, jv.Reason)
			case !kills:
				require.Equal(t, checker.CheckViolation, jv.Verdict, name)
				require.Regexp(t, `^(tick \d+ applied twice|lost update)`, jv.Reason, name)
			}
		}
	}
	// the presets make both kinds of job, and the harm of a killed write is
	// mostly seen
	require.Greater(t, verdicts["ok harm false"], 20, verdicts)
	require.Greater(t, verdicts["violation harm true"], 20, verdicts)
}

// simulateJob runs one job's ticks against a faithful store: each tick the
// lease holder runs the critical section, in some jobs sometimes a second
// node too (a holder that believes it still holds, or a node that took the
// lease with a greater token), a node's attempts one after
// another, in some jobs some paused for several ticks, some killed (in the read or the
// write) when kills is set, the lease moving now and then, and a failover
// sometimes granting a token again. It returns the history and whether
// harm was done (a tick applied twice, a lost update).
func simulateJob(r *rand.Rand, job string, rule checker.FenceRule, kills bool) ([]checker.Op, bool) {
	const nodes, ticks = 5, 60
	type attempt struct {
		read, write     checker.Op
		readAt, writeAt int64
		killedInRead    bool
		killedInWrite   bool
		registered      bool
	}
	fenced := rule != checker.FenceNone
	var atts []*attempt
	tokens, free := make([]int64, nodes+1), make([]int64, nodes+1)
	holder, granted := 1, int64(1)
	split := []int{0, 4, 12}[r.IntN(3)] // one tick in split has a second node; none when 0
	pauses := r.IntN(2) == 0
	tokens[1] = 1
	run := func(k int64, n int) {
		tick := 1000 * (k + 1)
		start := max(k*100+r.Int64N(50), free[n]+1)
		a := &attempt{}
		if kills {
			a.killedInRead, a.killedInWrite = r.IntN(20) == 0, r.IntN(10) == 0
		}
		a.read = checker.Op{Job: job, Kind: checker.OpRead, Node: n, Attempt: fmt.Sprintf("%d.1.%d", n, k), Tick: tick,
			Token: tokens[n], Owner: fmt.Sprintf("holder %d", n), Fenced: fenced, Call: start}
		a.readAt = start + 1 + r.Int64N(10)
		a.read.Return = a.readAt + r.Int64N(10)
		work := r.Int64N(60)
		if pauses && r.IntN(10) == 0 {
			work = 300 // a pause across ticks
		}
		a.write = a.read
		a.write.Kind = checker.OpWrite
		a.write.Call = a.read.Return + work
		a.writeAt = a.write.Call + 1 + r.Int64N(10)
		a.write.Return = a.writeAt + r.Int64N(10)
		free[n] = a.write.Return
		atts = append(atts, a)
	}
	for k := range int64(ticks) {
		if r.IntN(8) == 0 {
			old := holder
			holder = 1 + (holder+r.IntN(nodes-1))%nodes
			granted++
			tokens[holder] = granted
			if r.IntN(4) == 0 {
				tokens[holder] = tokens[old] // a failover sent the counter back
			}
		}
		run(k, holder)
		if split > 0 && r.IntN(split) == 0 {
			other := 1 + (holder+r.IntN(nodes-1))%nodes
			if r.IntN(2) == 0 {
				granted++ // it took the lease the holder believes it still has
				tokens[other] = granted
			}
			run(k, other)
		}
	}
	type point struct {
		at      int64
		attempt int
		write   bool
	}
	var points []point
	for i, a := range atts {
		points = append(points, point{a.readAt, i, false}, point{a.writeAt, i, true})
	}
	slices.SortStableFunc(points, func(a, b point) int { return cmp.Compare(a.at, b.at) })

	var ledger, fence int64
	var owner string
	registered, harm := false, false
	applied := map[int64]bool{}
	accepts := func(op checker.Op) bool {
		switch {
		case !fenced || !registered || op.Token > fence:
			return true
		case op.Token < fence:
			return false
		}
		return rule == checker.FenceToken || op.Owner == owner
	}
	register := func(op checker.Op) {
		if fenced {
			registered, fence, owner = true, op.Token, op.Owner
		}
	}
	var ops []checker.Op
	for _, p := range points {
		a := atts[p.attempt]
		switch {
		case !p.write && a.killedInRead:
			if accepts(a.read) && r.IntN(2) == 0 {
				register(a.read)
			}
			a.read.Result, a.read.Return = checker.OpUnknown, 0
			ops = append(ops, a.read)
		case !p.write && !accepts(a.read):
			a.read.Result = checker.OpRefused
			ops = append(ops, a.read)
		case !p.write:
			register(a.read)
			a.read.Result, a.read.Value, a.registered = checker.OpOK, ledger, true
			ops = append(ops, a.read)
		case a.registered: // a write: only after a read that was not refused
			a.write.Value = a.read.Value + 1
			switch {
			case !accepts(a.write):
				a.write.Result = checker.OpRefused
			case a.killedInWrite && r.IntN(2) == 0: // killed before it landed
			default:
				a.write.Result = checker.OpOK
				harm = harm || applied[a.write.Tick] || ledger != a.read.Value
				register(a.write)
				ledger, applied[a.write.Tick] = a.write.Value, true
			}
			if a.killedInWrite {
				a.write.Result, a.write.Return = checker.OpUnknown, 0
			}
			ops = append(ops, a.write)
		}
	}
	return ops, harm
}

// The sequential duplicate: node 2 reads what node 1 committed for tick
// 1000 and commits tick 1000 again. A counter's history is fine with it;
// the job's is not.
func ExampleCheckJobs() {
	op := func(kind checker.OpKind, node int, token, value, call int64) checker.Op {
		return checker.Op{
			Job: "export", Kind: kind, Node: node, Attempt: fmt.Sprintf("%d.1.1", node), Tick: 1000,
			Token: token, Owner: fmt.Sprintf("holder %d", node), Fenced: true,
			Value: value, Result: checker.OpOK, Call: call, Return: call + 10,
		}
	}
	v, err := checker.CheckJobs([]checker.Op{
		op(checker.OpRead, 1, 1, 0, 0), op(checker.OpWrite, 1, 1, 1, 20),
		op(checker.OpRead, 2, 2, 1, 40), op(checker.OpWrite, 2, 2, 2, 60),
	}, checker.FenceOwner, 10*time.Second, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(v[0].Job, v[0].Verdict)
	fmt.Println(v[0].Reason)
	// Output:
	// export violation
	// tick 1000 applied twice (node 2's write 2, tick 1000, token 2 of holder 2, attempt 2.1.1, after node 1's write 1, tick 1000, token 1 of holder 1, attempt 1.1.1)
}
