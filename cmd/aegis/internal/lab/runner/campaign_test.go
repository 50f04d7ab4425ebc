package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/schedule"
)

func configs(t *testing.T, c Campaign, strategy string) []lab.Config {
	t.Helper()
	cfgs, err := c.Configs(strategy)
	require.NoError(t, err)
	require.Len(t, cfgs, c.Runs)
	return cfgs
}

// The same seed draws the same runs; another seed other runs; a longer
// campaign begins with the shorter one's runs; and a strategy's runs do
// not depend on which other strategies the campaign has.
func TestCampaignDeterministic(t *testing.T) {
	t.Parallel()
	for _, name := range lab.StrategyNames() {
		a := configs(t, Campaign{Seed: 7, Runs: 20, Fence: true}, name)
		require.Equal(t, a, configs(t, Campaign{Seed: 7, Runs: 20, Fence: true, Strategies: []string{name}}, name), name)
		others := slices.DeleteFunc(lab.StrategyNames(), func(o string) bool { return o == name })
		require.Equal(t, a, configs(t, Campaign{Seed: 7, Runs: 20, Fence: true, Strategies: append(others[:3], name)}, name), name)
		require.NotEqual(t, a, configs(t, Campaign{Seed: 8, Runs: 20, Fence: true}, name), name)
		require.Equal(t, a[:5], configs(t, Campaign{Seed: 7, Runs: 5, Fence: true}, name), name)
	}
	// Two strategies of one seed draw different runs, not the same
	// sequence with another name.
	pg := configs(t, Campaign{Seed: 7, Runs: 5}, "pg-lease")
	etcd := configs(t, Campaign{Seed: 7, Runs: 5}, "etcd")
	for i := range etcd {
		etcd[i].Strategy = "pg-lease"
	}
	require.NotEqual(t, pg, etcd)
}

// Every run drawn for every strategy is valid and within the campaign's
// ranges, and every row of the fault table is drawn for some strategy.
func TestCampaignConfigs(t *testing.T) {
	t.Parallel()
	drawn := map[string]bool{}
	for seed := range uint64(10) {
		for _, name := range lab.StrategyNames() {
			s, _ := lab.LookupStrategy(name)
			for _, c := range configs(t, Campaign{Seed: seed, Runs: 20, Fence: seed%2 == 0}, name) {
				require.NoError(t, c.Validate(), "%s", c)
				require.Equal(t, seed%2 == 0 && s.Fenceable(), c.Fence)
				require.Equal(t, name, c.Strategy)
				require.GreaterOrEqual(t, c.Nodes, 3, "%s", c)
				require.LessOrEqual(t, c.Nodes, 5, "%s", c)
				require.GreaterOrEqual(t, c.Tick, 500*time.Millisecond, "%s", c)
				require.LessOrEqual(t, c.Tick, time.Second, "%s", c)
				require.GreaterOrEqual(t, c.Ticks(), 6, "%s", c)
				room := stallRoom * stall(s, c)
				require.LessOrEqual(t, c.Ticks(), max(12, int((room+c.Tick-1)/c.Tick)), "%s", c)
				require.GreaterOrEqual(t, c.Duration, room, "%s: room for its faults' stall", c)
				for _, ch := range c.Chaos {
					require.LessOrEqual(t, faultRow(t, ch).stall, stall(s, c), "%s", c)
					if _, server := ch.ServerKind(); s.Mode == schedule.ModeLeader && !server && (ch.Kind == lab.Pause || ch.Kind == lab.Kill) {
						require.GreaterOrEqual(t, c.Duration, stallRoom*(ch.For+c.TTL), "%s: %s may stop the leader", c, ch)
					}
				}
				require.Equal(t, time.Duration(c.Ticks())*c.Tick, c.Duration, "%s", c)
				require.GreaterOrEqual(t, c.Work, 100*time.Millisecond, "%s", c)
				require.LessOrEqual(t, c.Work, 400*time.Millisecond, "%s", c)
				lo, hi := (c.Work+c.Tick)/2, 3*(c.Work+c.Tick)
				if u := s.TTLUnit; u > 0 { // truncated to the unit: etcd's whole seconds
					require.Zero(t, c.TTL%u, "%s", c)
					lo = min(u, max(lo-u, 0))
				}
				require.GreaterOrEqual(t, c.TTL, lo, "%s", c)
				require.LessOrEqual(t, c.TTL, hi, "%s", c)
				require.GreaterOrEqual(t, len(c.Chaos), 3, "%s", c)
				require.LessOrEqual(t, len(c.Chaos), 5, "%s", c)
				kills := 0
				for _, ch := range c.Chaos {
					row := faultRow(t, ch)
					drawn[row.name] = true
					require.True(t, row.applies(s, func(servers.Kind) bool { return true }), "%s: %s", c, ch)
					if row.kills != "" {
						kills++
					}
					if ch.Kind == lab.Pause || ch.Kind == lab.Partition {
						require.NotEqual(t, c.TTL, ch.For, "%s: %s is shorter or longer than the TTL", c, ch)
					}
					if ch.Kind == lab.Latency {
						require.LessOrEqual(t, ch.Offset, max(10*time.Millisecond, (c.Tick-c.Work)/8), "%s: %s leaves the ticks their starting deadlines", c, ch)
					}
					require.LessOrEqual(t, ch.At, c.Duration*4/5, "%s: %s", c, ch)
					require.Equal(t, ch.At, ch.At.Truncate(grain), "%s: %s", c, ch)
				}
				require.LessOrEqual(t, kills, 1, "%s: at most one server killed per run", c)
				require.Equal(t, kills == 1, killsServer(c), "%s", c)
			}
		}
	}
	for _, k := range faultKinds {
		require.True(t, drawn[k.name], "the fault kind %s is never drawn", k.name)
	}
}

// faultRow returns the table's row a chaos was drawn from.
func faultRow(t *testing.T, ch lab.Chaos) faultKind {
	t.Helper()
	name := string(ch.Kind)
	switch {
	case ch.Server != "":
		name += "/server"
	case slices.ContainsFunc(faultKinds, func(k faultKind) bool { return k.name == name+":"+ch.Target }):
		name += ":" + ch.Target
	}
	for _, k := range faultKinds {
		if k.name == name {
			return k
		}
	}
	t.Fatalf("%s is from no row of the fault table", ch)
	return faultKind{}
}

// A session that did not start Redis itself (the shared servers) draws no
// fault that would kill or restart it; --tick and --ticks replace the
// drawn ones.
func TestCampaignConfigsOwnServers(t *testing.T) {
	t.Parallel()
	s, _ := lab.LookupStrategy("redis")
	c := Campaign{Seed: 3, Runs: 50, Fence: true}
	cfgs, err := c.configs(s, func(k servers.Kind) bool { return k != servers.KindRedis })
	require.NoError(t, err)
	for _, cfg := range cfgs {
		for _, ch := range cfg.Chaos {
			k, kills := ch.ServerKind()
			require.False(t, kills && k == servers.KindRedis, "%s: %s", cfg, ch)
		}
		require.NoError(t, cfg.Validate())
	}
	quick := Campaign{Seed: 3, Runs: 20, Fence: true, Tick: 300 * time.Millisecond, Ticks: 4}
	for _, name := range lab.StrategyNames() {
		for _, cfg := range configs(t, quick, name) {
			require.Equal(t, 300*time.Millisecond, cfg.Tick)
			require.Equal(t, 4, cfg.Ticks())
			require.LessOrEqual(t, cfg.Work, 240*time.Millisecond, "work within four fifths of the tick")
		}
	}
}

// Every row that kills a server is named KIND:TARGET of what it draws,
// which is how a run that must go alone is recognised.
func TestFaultKindsKillsNamed(t *testing.T) {
	t.Parallel()
	c := lab.DefaultConfig()
	c.Strategy = "redis"
	for _, k := range faultKinds {
		if k.kills == "" {
			continue
		}
		ch := k.gen(rand.New(rand.NewPCG(1, 2)), c)
		require.Equal(t, k.name, string(ch.Kind)+":"+ch.Target)
	}
}

// Two runs go at once, a run of weight two goes alone, and nothing starts
// after a run failed or ctx ended.
func TestRunWeighted(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	active, most := 0, 0
	weights := []int{1, 1, 2, 1, 1}
	started := make([]chan struct{}, len(weights))
	for i := range started {
		started[i] = make(chan struct{})
	}
	// together waits until run j is under way beside run i.
	together := func(i, j int) {
		select {
		case <-started[j]:
		case <-time.After(20 * time.Second):
			t.Errorf("run %d never ran beside run %d", i, j)
		}
	}
	var alone bool
	runWeighted(t.Context(), 2, weights, func(i int) bool {
		mu.Lock()
		active += weights[i]
		most = max(most, active)
		if i == 2 {
			alone = active == 2
		}
		mu.Unlock()
		close(started[i])
		switch i {
		case 0, 1:
			together(i, 1-i)
		case 3, 4:
			together(i, 7-i)
		}
		mu.Lock()
		active -= weights[i]
		mu.Unlock()
		return true
	})
	require.Equal(t, 2, most)
	require.True(t, alone, "the run of weight 2 ran alone")

	var calls []int
	runWeighted(t.Context(), 1, []int{1, 1, 1, 1}, func(i int) bool {
		calls = append(calls, i)
		return i != 1
	})
	require.Equal(t, []int{0, 1}, calls, "nothing starts after a failed run")

	ctx, cancel := context.WithCancel(t.Context())
	calls = nil
	runWeighted(ctx, 1, []int{1, 2, 1}, func(i int) bool {
		calls = append(calls, i)
		cancel()
		return true
	})
	require.Equal(t, []int{0}, calls, "nothing starts after ctx ended")
}

func TestCampaignValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c    Campaign
		want string
	}{
		{Campaign{Runs: 0}, "--runs 0: want 1 to 1000"},
		{Campaign{Runs: 1001}, "--runs 1001: want 1 to 1000"},
		{Campaign{Runs: 1, Strategies: []string{"sqlite", "mutex"}}, `--strategy "mutex": unknown (known: none, sqlite`},
		{Campaign{Runs: 1, Strategies: []string{"sqlite", "sqlite"}}, "--strategy sqlite: given twice"},
		{Campaign{Runs: 1, Tick: time.Millisecond}, "--tick 1ms: want 10ms to 1m"},
		{Campaign{Runs: 1, Ticks: -1}, "--ticks -1: want 1 to 1000"},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.want)
		require.ErrorContains(t, err, tt.want)
		_, err = tt.c.Configs("sqlite")
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.want)
	}
	require.NoError(t, Campaign{Runs: 1000, Strategies: []string{"sqlite", "redis"}}.Validate())
	_, err := Campaign{Runs: 1}.Configs("mutex")
	require.ErrorIs(t, err, aegis.ErrInvalid)
}

func TestJudgeRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r               lab.Report
		harms, excluded []string
		agree           bool
	}{
		{lab.Report{Checker: lab.CheckOK, StoreAgrees: true}, nil, nil, true},
		{lab.Report{Checker: lab.CheckViolation, Harms: []lab.Harm{lab.HarmDuplicate}, StoreAgrees: true}, []string{"duplicate"}, nil, true},
		{lab.Report{Checker: lab.CheckViolation, Harms: []lab.Harm{lab.HarmDuplicate, lab.HarmLostUpdate}, Unsafe: []lab.Harm{lab.HarmLostUpdate}, StoreAgrees: true},
			[]string{"duplicate", "lost-update"}, []string{"lost-update"}, true},
		{lab.Report{Checker: lab.CheckOK, Harms: []lab.Harm{lab.HarmDuplicate}, StoreAgrees: false}, []string{"duplicate"}, nil, false},
	}
	for _, tt := range tests {
		harms, excluded, agree := judgeRun(&tt.r)
		require.Equal(t, tt.harms, harms, "%+v", tt.r)
		require.Equal(t, tt.excluded, excluded, "%+v", tt.r)
		require.Equal(t, tt.agree, agree, "%+v", tt.r)
	}
}

// The lab labels safe, fenced, the strategies whose ledger is kept and
// whose ticks run once (under their condition); unfenced, none.
func TestLabelledSafe(t *testing.T) {
	t.Parallel()
	var safe []string
	for _, s := range lab.Strategies {
		require.False(t, labelledSafe(s, false), "%s unfenced", s.Name)
		if labelledSafe(s, true) {
			safe = append(safe, s.Name)
		}
	}
	require.Equal(t, []string{"sqlite", "pg-lease", "pg-unique", "etcd", "zookeeper", "nats", "queue"}, safe)
}

// The replay line is a shell command line: a POSIX shell splits it back
// into the flags RunArgs renders.
func TestReplayCommandShell(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	var args []string
	var words []string
	for _, name := range lab.StrategyNames() {
		for _, c := range configs(t, Campaign{Seed: 5, Runs: 3, Fence: name != "redis"}, name) {
			line := replayCommand(c)
			prefix := "aegis lab run " + strings.Join([]string{"--strategy", name}, " ") + " "
			require.True(t, strings.HasPrefix(line, prefix), line)
			args = append(args, RunArgs(c)...)
			words = append(words, strings.TrimPrefix(line, "aegis lab run "))
		}
	}
	odd := []string{"it's", "a b", "", "$HOME", `"q"`, "back\\slash", "semi;colon"}
	args = append(args, odd...)
	for _, o := range odd {
		words = append(words, shellQuote(o))
	}
	// The shell parses the words as a command line, then prints each
	// argument NUL-terminated.
	script := `args() { for a in "$@"; do printf '%s\0' "$a"; done; }; args ` + strings.Join(words, " ")
	out, err := exec.Command(sh, "-c", script).Output()
	require.NoError(t, err)
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	require.Equal(t, args, got)
	require.Equal(t, "pause:holder@1s+2s", shellQuote("pause:holder@1s+2s"), "a chaos spec needs no quotes")
}

func sampleCampaign() *CampaignResult {
	unsafe := lab.DefaultConfig()
	unsafe.Strategy, unsafe.Nodes, unsafe.Duration, unsafe.Tick, unsafe.Work, unsafe.TTL = "optimistic", 4, 5600*time.Millisecond, 700*time.Millisecond, 250*time.Millisecond, 1500*time.Millisecond
	unsafe.Chaos = []lab.Chaos{{Kind: lab.Kill, Target: lab.Holder, At: 2 * time.Second}, {Kind: lab.Skew, Target: "node2", Offset: -1200 * time.Millisecond}, {Kind: lab.Pause, Target: "node1", At: 3 * time.Second, For: 2 * time.Second}}
	// sqlite, node2's clock 1.2 s behind, further than LockAtLeastFor: a
	// tick run again is one its label allows.
	skewed := unsafe
	skewed.Strategy, skewed.Chaos = "sqlite", unsafe.Chaos[1:2]
	rows := []*StrategyResult{
		{Strategy: "none", Reports: []*lab.Report{
			{Checker: lab.CheckOK, DuplicatesApplied: 6, Harms: []lab.Harm{lab.HarmDuplicate}, Disagreement: "invoice-export: the store shows 6 ticks applied twice and 0 lost updates, the checker says ok"},
			{Checker: lab.CheckViolation, DuplicatesApplied: 6, Harms: []lab.Harm{lab.HarmDuplicate}, StoreAgrees: true}}},
		{Strategy: "sqlite", Fenced: true, Reports: []*lab.Report{{Strategy: "sqlite", Checker: lab.CheckOK, StoreAgrees: true, Verdict: lab.VerdictInconclusive,
			Inconclusive: []string{"6 of 8 job ticks missed: 2 executed, fewer than 50%"}, Config: skewed},
			{Strategy: "sqlite", Checker: lab.CheckViolation, DuplicatesApplied: 1, Refires: 1, Harms: []lab.Harm{lab.HarmDuplicate, lab.HarmRefire}, StoreAgrees: true, Config: skewed}}},
		{Strategy: "optimistic", Fenced: true, Reports: []*lab.Report{{Checker: lab.CheckOK, StoreAgrees: true},
			{Strategy: "optimistic", Checker: lab.CheckViolation, LostUpdates: 1, Refires: 2, Harms: []lab.Harm{lab.HarmLostUpdate}, Unsafe: []lab.Harm{lab.HarmLostUpdate}, StoreAgrees: true, Config: unsafe}}},
		{Strategy: "etcd", Fenced: true, Skipped: "etcd is not installed (apt-get install etcd-server)"},
	}
	for _, r := range rows {
		s, _ := lab.LookupStrategy(r.Strategy)
		r.LabelledSafe = labelledSafe(s, r.Fenced)
		r.Guarantee = s.Guarantee(r.Fenced).String()
		r.Harms, r.HarmedRuns, r.InconclusiveRuns = map[string]int{}, []HarmedRun{}, []InconclusiveRun{}
		if r.Strategy == "none" {
			r.Reports[0].Config = unsafe
			r.Reports[0].Config.Strategy, r.Reports[0].Config.Fence, r.Reports[0].Config.Chaos = "none", false, unsafe.Chaos[:1]
			r.Reports[1].Config = r.Reports[0].Config
		}
		r.tally()
	}
	return &CampaignResult{Seed: 1, Runs: 2, Strategies: rows, DurationS: 74.2}
}

// The table and the JSON, from constructed reports: the counts, the
// replay lines, the strategies skipped, and which failure ends the
// campaign.
func TestCampaignResult(t *testing.T) {
	t.Parallel()
	r := sampleCampaign()
	var b bytes.Buffer
	require.NoError(t, r.WriteTable(&b))
	golden(t, "campaign.txt.golden", b.Bytes())
	j, err := json.MarshalIndent(r, "", "  ")
	require.NoError(t, err)
	golden(t, "campaign.json.golden", append(j, '\n'))

	opt := r.Strategies[2]
	require.Equal(t, 2, opt.Runs)
	require.Equal(t, 1, opt.Harmed)
	require.Equal(t, 2, opt.Agree)
	require.Equal(t, 1, opt.Unsafe, "a lost update, which its label (fenced: the ledger kept) excludes")
	require.Equal(t, map[string]int{"lost-update": 1}, opt.Harms)
	require.Equal(t, 2, opt.Refires)
	require.Zero(t, opt.RefiresExcluded, "optimistic may run a tick twice")
	sqlite := r.Strategies[1]
	require.Equal(t, 1, sqlite.Refires)
	require.Zero(t, sqlite.RefiresExcluded, "its clocks were set apart by more than LockAtLeastFor")
	require.Zero(t, sqlite.Unsafe)
	require.Equal(t, "1 (1 allowed)", sqlite.refiresCell())
	require.Equal(t, 1, sqlite.Inconclusive)
	require.Equal(t, []InconclusiveRun{{Command: replayCommand(sqlite.Reports[0].Config), Reasons: sqlite.Reports[0].Inconclusive, Config: sqlite.Reports[0].Config}}, sqlite.InconclusiveRuns)
	require.Equal(t, "1 of 6 runs inconclusive, more than 10%: they prove nothing (sqlite 1 of 2)", r.TooInconclusive(DefaultMaxInconclusive))
	require.Empty(t, r.TooInconclusive(1.0/6), "1 of 6 is not more than a sixth")
	refuted := r.Refuted()
	require.Len(t, refuted, 2, "optimistic refuted; none did the harm its label allows, but its checker disagreed once with the store")
	require.Equal(t, "none", refuted[0].Strategy)
	require.Equal(t, "optimistic", refuted[1].Strategy)
	none := r.Strategies[0]
	require.Equal(t, 2, none.Harmed)
	require.Zero(t, none.Unsafe)
	require.Equal(t, 1, none.Agree, "the checker missed one run's duplicates")
	require.True(t, slices.ContainsFunc(none.HarmedRuns, func(u HarmedRun) bool {
		return u.Command == "aegis lab run --strategy none --fence=false --nodes 4 --duration 5.6s --tick 700ms --work 250ms --ttl 1.5s --chaos kill:holder@2s"
	}), "%+v", none.HarmedRuns)
}
