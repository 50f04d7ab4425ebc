package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/schedule"
)

// A campaign (aegis lab campaign) draws runs per strategy from a seed, runs
// them through the Session and judges each run's report. The judgement is
// judgeRun and labelledSafe, first below.

// judgeRun says which harms a run did (the report's, from the store and
// the checker), which of them the strategy's label excludes in that run's
// configuration (Strategy.Excludes: the campaign's test), and whether the
// checker's verdict agreed with SQL over the audit and ledger tables.
func judgeRun(r *lab.Report) (harms, excluded []string, agree bool) {
	for _, h := range r.Harms {
		harms = append(harms, string(h))
	}
	for _, h := range r.Unsafe {
		excluded = append(excluded, string(h))
	}
	return harms, excluded, r.StoreAgrees
}

// labelledSafe reports whether the lab labels the strategy safe, fenced or
// not: its ledger kept and each tick run once (under its condition).
func labelledSafe(s lab.Strategy, fenced bool) bool { return s.Safe(fenced) }

// faultKind is one kind of fault a campaign draws: adding a kind is one
// row of faultKinds.
type faultKind struct {
	name string
	// needs: the fault applies to a strategy that uses one of these
	// servers (usedServers); nil: to every strategy.
	needs []servers.Kind
	// only: the strategies it applies to; nil: any that needs allows.
	only []string
	// kills is the server the fault kills or restarts, "" for none. The lab
	// does it only to a server it started; a run draws at most one such
	// fault (each heals the server as one fault left it), and runs alone,
	// since the session's other runs share the server. Such a row's name
	// is its faults' KIND:TARGET, by which killsServer finds them.
	kills servers.Kind
	// perTarget: the fault lasts the whole run, so a run has one per
	// target (a second skew of a node would replace the first).
	perTarget bool
	// stall is how long the fault can keep every node from a grant: a
	// run with it lasts at least stallRoom times that, so that the ticks
	// it costs are not most of the run's.
	stall time.Duration
	gen   func(rng *rand.Rand, c lab.Config) lab.Chaos
}

// stallRoom is how many times its faults' longest stall a run lasts.
const stallRoom = 3

// networked are the servers a node reaches through the lab's proxies.
var networked = []servers.Kind{servers.KindPostgres, servers.KindRedis, servers.KindEtcd, servers.KindZooKeeper, servers.KindNATS}

var faultKinds = []faultKind{
	{name: "pause", gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Pause, Target: drawTarget(rng, c), At: drawAt(rng, c), For: drawPeriod(rng, c)}
	}},
	{name: "kill", gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Kill, Target: drawTarget(rng, c), At: drawAt(rng, c)}
	}},
	{name: "partition", needs: networked, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Partition, Target: drawTarget(rng, c), At: drawAt(rng, c), For: drawPeriod(rng, c)}
	}},
	{name: "skew", perTarget: true, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		off := drawDuration(rng, 100*time.Millisecond, 2*time.Second)
		if rng.IntN(2) == 0 {
			off = -off
		}
		return lab.Chaos{Kind: lab.Skew, Target: fmt.Sprintf("node%d", 1+rng.IntN(c.Nodes)), Offset: off}
	}},
	{name: "latency", needs: networked, perTarget: true, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		s, _ := lab.LookupStrategy(c.Strategy)
		used := usedServers(s)
		// At most an eighth of the time a tick leaves beside its work: a
		// tick's grant, read and write take about eight round trips, and
		// slower (170ms in a tick of 750ms, measured) the leases are granted
		// past the ticks' starting deadlines: they misfire, and the run,
		// missing most of its ticks, proves nothing.
		room := (c.Tick - c.Work) / 8
		if s.Mode == schedule.ModeLeader {
			// A queue job's run must end within its tick, or the next tick
			// finds it still going and is skipped (overlap forbid): a poll
			// (up to a quarter tick) and about sixteen round trips (the
			// claim, the read's and the write's transactions, the
			// completion) beside the work. 30ms in a 690ms tick of 190ms
			// work missed every other tick of the every-tick job.
			room = (c.Tick - c.Work - c.Tick/4) / 16
		}
		hi := max(10*time.Millisecond, min(200*time.Millisecond, room))
		return lab.Chaos{Kind: lab.Latency, Target: string(used[rng.IntN(len(used))]), Offset: drawDuration(rng, 10*time.Millisecond, hi)}
	}},
	{name: "failover:redis", needs: []servers.Kind{servers.KindRedis}, only: []string{"redis"}, kills: servers.KindRedis, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Failover, Target: "redis", At: drawAt(rng, c)}
	}},
	{name: "restart:redis", needs: []servers.Kind{servers.KindRedis}, kills: servers.KindRedis, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Restart, Target: "redis", At: drawAt(rng, c)}
	}},
	{name: "partition/server", needs: networked, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		s, _ := lab.LookupStrategy(c.Strategy)
		used := usedServers(s)
		return lab.Chaos{Kind: lab.Partition, Target: drawTarget(rng, c), At: drawAt(rng, c), For: drawPeriod(rng, c), Server: string(used[rng.IntN(len(used))])}
	}},
	{name: "crash:postgres", needs: []servers.Kind{servers.KindPostgres}, kills: servers.KindPostgres, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Crash, Target: string(servers.KindPostgres), At: drawAt(rng, c)}
	}},
	// A grant in flight when etcd's leader dies waits for etcd's request
	// timeout, about 5 s (TestKillEtcdLeader): every node misses its ticks
	// meanwhile.
	{name: "kill:etcd", needs: []servers.Kind{servers.KindEtcd}, kills: servers.KindEtcd, stall: 5 * time.Second, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Kill, Target: string(servers.KindEtcd), At: drawAt(rng, c)}
	}},
	{name: "kill:zookeeper", needs: []servers.Kind{servers.KindZooKeeper}, kills: servers.KindZooKeeper, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Kill, Target: string(servers.KindZooKeeper), At: drawAt(rng, c)}
	}},
	// No grant is answered until the bucket's stream has a new leader
	// (nats-server's fixed RAFT timings: 4 to 9 s): the first grant after
	// the kill came 4.4, 4.8, 6.8 and 7.2 s after it in four runs of
	// TestKillNATSLeader.
	{name: "kill:nats", needs: []servers.Kind{servers.KindNATS}, kills: servers.KindNATS, stall: 8 * time.Second, gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Kill, Target: string(servers.KindNATS), At: drawAt(rng, c)}
	}},
	// The faults after which a tick that ran must not run again: a
	// replica restarted right after its run succeeded (every mode), the
	// leader killed or paused past its lease (leader mode).
	{name: "kill:committer", gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Kill, Target: lab.Committer, At: drawAt(rng, c)}
	}},
	{name: "kill:leader", only: leaderMode(), gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Kill, Target: lab.Leader, At: drawAt(rng, c)}
	}},
	{name: "pause:leader", only: leaderMode(), gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		return lab.Chaos{Kind: lab.Pause, Target: lab.Leader, At: drawAt(rng, c), For: drawPeriod(rng, c)}
	}},
	{name: "edit", gen: func(rng *rand.Rand, c lab.Config) lab.Chaos {
		jobs := c.Jobs()
		j := jobs[rng.IntN(len(jobs))]
		ch := lab.Chaos{Kind: lab.Edit, Target: j.Name, At: drawAt(rng, c)}
		switch rng.IntN(3) {
		case 0:
			ch.Spec = "pause"
		case 1:
			ch.Spec = "resume"
		default:
			ch.Offset = c.Tick * time.Duration(1+rng.IntN(3))
			ch.Spec = ch.Offset.String()
		}
		return ch
	}},
}

// leaderMode lists the strategies in leader mode: the ones with a leader
// to kill.
func leaderMode() []string {
	var out []string
	for _, s := range lab.Strategies {
		if s.Mode == schedule.ModeLeader {
			out = append(out, s.Name)
		}
	}
	return out
}

// usedServers are the servers a strategy's nodes reach: its own, and
// PostgreSQL as the store of record, except for sqlite, whose lease is a
// file and which the lab treats as having no network.
func usedServers(s lab.Strategy) []servers.Kind {
	used := slices.Clone(s.Needs)
	if !s.LeaseFile && !slices.Contains(used, servers.KindPostgres) {
		used = append(used, servers.KindPostgres)
	}
	return used
}

// applies reports whether the fault kind fits strategy s, given which
// servers the lab started itself (own).
func (k faultKind) applies(s lab.Strategy, own func(servers.Kind) bool) bool {
	switch {
	case k.needs != nil && !slices.ContainsFunc(usedServers(s), func(u servers.Kind) bool { return slices.Contains(k.needs, u) }):
		return false
	case k.only != nil && !slices.Contains(k.only, s.Name):
		return false
	case k.kills != "" && !own(k.kills):
		return false
	}
	return true
}

// grain is the resolution of drawn durations, so that replay lines read
// "730ms", not "731.402ms".
const grain = 10 * time.Millisecond

// drawDuration draws a duration in [lo, hi] in steps of grain.
func drawDuration(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	lo = max((lo+grain-1)/grain*grain, grain)
	hi = max(hi/grain*grain, lo)
	return lo + grain*time.Duration(rng.IntN(int((hi-lo)/grain)+1))
}

// drawTarget is the holder a third of the time, the writer a sixth, else
// a node.
func drawTarget(rng *rand.Rand, c lab.Config) string {
	switch rng.IntN(6) {
	case 0, 1:
		return lab.Holder
	case 2:
		return lab.Writer
	}
	return fmt.Sprintf("node%d", 1+rng.IntN(c.Nodes))
}

// drawAt is a moment in the first four fifths of the run, so that the
// fault has ticks left to do harm in.
func drawAt(rng *rand.Rand, c lab.Config) time.Duration {
	return drawDuration(rng, 0, c.Duration*4/5)
}

// drawPeriod is how long a pause or a partition lasts: shorter than the
// TTL (the holder comes back in time) or longer (it is replaced), as often.
func drawPeriod(rng *rand.Rand, c lab.Config) time.Duration {
	if rng.IntN(2) == 0 {
		return drawDuration(rng, c.TTL*3/10, c.TTL*9/10)
	}
	return drawDuration(rng, c.TTL*12/10, c.TTL*25/10)
}

// maxCampaignRuns bounds a campaign's runs per strategy.
const maxCampaignRuns = 1000

// Campaign is a seeded randomized series of runs per strategy: nodes,
// ticks, work, TTL and 3 to 5 faults drawn from the kinds the strategy's
// servers allow. The same campaign draws the same runs.
type Campaign struct {
	// Seed seeds the draws, with each strategy's name: adding a strategy
	// changes no other strategy's runs.
	Seed uint64
	// Runs is how many runs per strategy, 1 to maxCampaignRuns.
	Runs int
	// Strategies are the strategies to run. Default: every strategy the
	// session can run (the others are reported skipped, with why).
	Strategies []string
	// Fence is the runs' --fence.
	Fence bool
	// Tick and Ticks, when not zero, replace the drawn tick (500ms to 1s)
	// and number of ticks (6 to 12): a quick campaign.
	Tick  time.Duration
	Ticks int
	// OutDir is where the checker's visualisations of violations go; ""
	// writes none.
	OutDir string
}

// Validate checks the campaign and says what is wrong, naming the flag,
// in an error that wraps aegis.ErrInvalid.
func (c Campaign) Validate() error {
	switch {
	case c.Runs < 1 || c.Runs > maxCampaignRuns:
		return badinput.Errorf("--runs %d: want 1 to %d", c.Runs, maxCampaignRuns)
	case c.Tick != 0 && (c.Tick < 10*time.Millisecond || c.Tick > time.Minute):
		return badinput.Errorf("--tick %s: want 10ms to 1m (0: drawn)", c.Tick)
	case c.Ticks < 0 || c.Ticks > lab.MaxTicks:
		return badinput.Errorf("--ticks %d: want 1 to %d (0: drawn)", c.Ticks, lab.MaxTicks)
	}
	for i, name := range c.Strategies {
		if _, ok := lab.LookupStrategy(name); !ok {
			return badinput.Errorf("--strategy %q: unknown (known: %s)", name, strings.Join(lab.StrategyNames(), ", "))
		}
		if slices.Contains(c.Strategies[:i], name) {
			return badinput.Errorf("--strategy %s: given twice", name)
		}
	}
	return nil
}

// Configs returns the runs the campaign draws for strategy, as they would
// be drawn in a session that started every server itself (so that faults
// which kill or restart a server are drawn too).
func (c Campaign) Configs(strategy string) ([]lab.Config, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s, ok := lab.LookupStrategy(strategy)
	if !ok {
		return nil, badinput.Errorf("--strategy %q: unknown (known: %s)", strategy, strings.Join(lab.StrategyNames(), ", "))
	}
	return c.configs(s, func(servers.Kind) bool { return true })
}

// maxDraws bounds the draws of one run: a run the table cannot fill with
// valid faults in that many is a bug in the table, not bad luck.
const maxDraws = 100

func (c Campaign) configs(s lab.Strategy, own func(servers.Kind) bool) ([]lab.Config, error) {
	h := fnv.New64a()
	h.Write([]byte(s.Name))
	rng := rand.New(rand.NewPCG(c.Seed, h.Sum64()))
	var kinds []faultKind
	for _, k := range faultKinds {
		if k.applies(s, own) {
			kinds = append(kinds, k)
		}
	}
	cfgs := make([]lab.Config, 0, c.Runs)
	for len(cfgs) < c.Runs {
		var err error
		for range maxDraws {
			cfg, ok := c.draw(rng, s, kinds)
			if !ok {
				err = errors.New("too few faults fit")
				continue
			}
			if err = cmp.Or(cfg.Validate(), s.CheckTTL(cfg.TTL)); err == nil {
				cfgs = append(cfgs, cfg)
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("lab: campaign: no valid run of %s in %d draws: %w", s.Name, maxDraws, err)
		}
	}
	return cfgs, nil
}

// draw draws one run; ok is false when its faults could not be drawn.
func (c Campaign) draw(rng *rand.Rand, s lab.Strategy, kinds []faultKind) (lab.Config, bool) {
	// Fence false when there is no token: the replay line says what ran.
	cfg := lab.Config{Strategy: s.Name, Fence: c.Fence && s.Fenceable(), Nodes: 3 + rng.IntN(3)}
	// Drawn even when replaced, so that --tick and --ticks change no
	// other draw's place in the sequence.
	cfg.Tick = drawDuration(rng, 500*time.Millisecond, time.Second)
	ticks := 6 + rng.IntN(7)
	if c.Tick != 0 {
		cfg.Tick = c.Tick
	}
	if c.Ticks != 0 {
		ticks = c.Ticks
	}
	cfg.Duration = time.Duration(ticks) * cfg.Tick
	cfg.Work = drawDuration(rng, 100*time.Millisecond, min(400*time.Millisecond, cfg.Tick*4/5))
	base := cfg.Work + cfg.Tick
	cfg.TTL = drawDuration(rng, base/2, 3*base)
	if u := s.TTLUnit; u > 0 {
		// etcd's whole seconds: its nodes refuse any other TTL. Down, not
		// up: a holder lost to a fault keeps its job's ticks for a TTL.
		cfg.TTL = max(u, cfg.TTL.Truncate(u))
	}

	n := 3 + rng.IntN(3)
	killed := false
	for range maxDraws {
		if len(cfg.Chaos) == n || len(kinds) == 0 {
			break
		}
		k := kinds[rng.IntN(len(kinds))]
		if k.kills != "" && killed {
			continue
		}
		ch := k.gen(rng, cfg)
		if k.perTarget && slices.ContainsFunc(cfg.Chaos, func(o lab.Chaos) bool { return o.Kind == ch.Kind && o.Target == ch.Target }) {
			continue
		}
		killed = killed || k.kills != ""
		cfg.Chaos = append(cfg.Chaos, ch)
	}
	if room := stallRoom * stall(s, cfg); c.Ticks == 0 && cfg.Duration < room {
		cfg.Duration = (room + cfg.Tick - 1) / cfg.Tick * cfg.Tick // whole ticks
	}
	return cfg, len(cfg.Chaos) == n
}

// stall is how long the faults of c can keep every node from running
// ticks: the longest row's stall (kill:nats, kill:etcd); in leader mode, where one
// leader enqueues every job's ticks, every node fault may land on the
// leader in turn, each for its length and then a TTL until another is
// elected: their sum (three leader faults in a 9 s run missed 13 of 19
// ticks).
func stall(s lab.Strategy, c lab.Config) time.Duration {
	var longest, leader time.Duration
	for _, ch := range c.Chaos {
		for _, k := range faultKinds {
			if k.name == string(ch.Kind)+":"+ch.Target {
				longest = max(longest, k.stall)
			}
		}
		if _, server := ch.ServerKind(); s.Mode != schedule.ModeLeader || server {
			continue
		}
		switch ch.Kind {
		case lab.Pause, lab.Partition, lab.Kill:
			leader += ch.For + c.TTL
		}
	}
	return max(longest, leader)
}

// killsServer reports whether a run kills or restarts a server, and so
// must run alone.
func killsServer(c lab.Config) bool {
	return slices.ContainsFunc(c.Chaos, func(ch lab.Chaos) bool {
		return slices.ContainsFunc(faultKinds, func(k faultKind) bool {
			return k.kills != "" && k.name == string(ch.Kind)+":"+ch.Target
		})
	})
}

// RunArgs renders a run as the flags of `aegis lab run` that replay it.
// Scenario and OutDir have no place there.
func RunArgs(c lab.Config) []string {
	args := []string{"--strategy", c.Strategy, fmt.Sprintf("--fence=%t", c.Fence), "--nodes", fmt.Sprint(c.Nodes),
		"--duration", c.Duration.String(), "--tick", c.Tick.String(), "--work", c.Work.String(), "--ttl", c.TTL.String()}
	if c.Catalog != nil {
		args = append(args, "--catalog", lab.FormatCatalog(c.Catalog))
	}
	if c.Standby > 0 {
		args = append(args, "--standby", fmt.Sprint(c.Standby))
	}
	for _, ch := range c.Chaos {
		args = append(args, "--chaos", ch.String())
	}
	return args
}

// replayCommand is the shell command line that replays a run.
func replayCommand(c lab.Config) string {
	words := []string{"aegis", "lab", "run"}
	for _, a := range RunArgs(c) {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}

// shellQuote quotes s for a POSIX shell, leaving it bare when it holds
// only characters no shell treats specially (a chaos spec's included).
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,:/@%+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// RunCampaign runs the campaign: for each strategy, its runs, at most two
// at a time (a run that kills or restarts a server alone), and judges each
// from its report. A strategy the session cannot run is skipped, with
// why; a store of record that cannot be opened is an error. A run that fails to start (not a harm: a lab or server error) ends
// the campaign with its error, after the runs under way. When ctx ends, the
// runs stop and the result covers the runs that ended before, with ctx's
// error. done, when not nil, is called as each run ends, one at a time.
func (s *Session) RunCampaign(ctx context.Context, c Campaign, done func(CampaignRun)) (*CampaignResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	res := &CampaignResult{Seed: c.Seed, Runs: c.Runs, Strategies: []*StrategyResult{}}
	names := c.Strategies
	if len(names) == 0 {
		names = lab.StrategyNames()
	}
	own := func(k servers.Kind) bool { return !s.given(k) }
	s.logUndrawnFaults(names, own)
	// A store that cannot be opened is the campaign's failure, not every
	// strategy's unavailability.
	if _, _, err := s.openStore(ctx); err != nil {
		return nil, err
	}
	jobs, stopped, err := s.campaignJobs(ctx, c, names, own, res)
	switch {
	case err != nil:
		return nil, err
	case stopped:
		return res, ctx.Err()
	}
	if err := s.runCampaignJobs(ctx, jobs, done); err != nil {
		return nil, fmt.Errorf("lab: campaign: %w", err)
	}
	for _, row := range res.Strategies {
		row.tally()
	}
	res.DurationS = time.Since(begin).Round(time.Millisecond).Seconds()
	return res, ctx.Err()
}

// logUndrawnFaults says which faults of the named strategies the campaign
// draws none of, because they touch servers the session was given.
func (s *Session) logUndrawnFaults(names []string, own func(servers.Kind) bool) {
	for _, k := range faultKinds {
		if k.kills != "" && !own(k.kills) && slices.ContainsFunc(names, func(n string) bool {
			st, _ := lab.LookupStrategy(n)
			return k.applies(st, func(servers.Kind) bool { return true })
		}) {
			fmt.Fprintf(s.opts.Log, "lab: campaign: no %s drawn: the %s servers were given, and the lab touches only its own\n", k.name, k.kills)
		}
	}
}

// campaignJob is one run of a campaign: the i-th of its strategy's row.
type campaignJob struct {
	row *StrategyResult
	i   int
	cfg lab.Config
}

// campaignJobs adds each named strategy's row to res and returns the runs
// of the strategies available, in order. A strategy the session cannot
// run gets its row, skipped, with why; stopped is true when ctx ended
// while asking. The error is a campaign that cannot draw its configs.
func (s *Session) campaignJobs(ctx context.Context, c Campaign, names []string, own func(servers.Kind) bool, res *CampaignResult) (jobs []campaignJob, stopped bool, err error) {
	for _, name := range names {
		st, _ := lab.LookupStrategy(name)
		row := &StrategyResult{Strategy: name, Fenced: c.Fence && st.Fenceable(), Harms: map[string]int{}, HarmedRuns: []HarmedRun{}, InconclusiveRuns: []InconclusiveRun{}}
		row.LabelledSafe = labelledSafe(st, row.Fenced)
		row.Guarantee = st.Guarantee(row.Fenced).String()
		res.Strategies = append(res.Strategies, row)
		if err := s.Availability(ctx, name); err != nil {
			if ctx.Err() != nil {
				return nil, true, nil
			}
			row.Skipped = err.Error()
			continue
		}
		cfgs, err := c.configs(st, own)
		if err != nil {
			return nil, false, err
		}
		row.Reports = make([]*lab.Report, len(cfgs))
		for i, cfg := range cfgs {
			cfg.OutDir = c.OutDir
			jobs = append(jobs, campaignJob{row, i, cfg})
		}
	}
	return jobs, false, nil
}

// runCampaignJobs runs the jobs, at most campaignParallel at a time and a
// run that kills a server alone, puts each report in its row and calls
// done, when not nil, as each run ends, one at a time. It returns the
// errors of the runs that failed to start, joined; after the first, it
// starts no more runs.
func (s *Session) runCampaignJobs(ctx context.Context, jobs []campaignJob, done func(CampaignRun)) error {
	var (
		mu    sync.Mutex // guards errs, ended and the calls of done
		errs  []error
		ended int
	)
	weights := make([]int, len(jobs))
	for i, j := range jobs {
		weights[i] = 1
		if killsServer(j.cfg) {
			weights[i] = campaignParallel
		}
	}
	runWeighted(ctx, campaignParallel, weights, func(i int) bool {
		j := jobs[i]
		rep, err := s.runOne(ctx, j.cfg)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ctx.Err() != nil: // stopped early: its report judges nothing
			return false
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", replayCommand(j.cfg), err))
			return false
		}
		j.row.Reports[j.i] = rep
		ended++
		if done != nil {
			harms, _, agree := judgeRun(rep)
			done(CampaignRun{N: ended, Of: len(jobs), Config: j.cfg, Report: rep, Harms: harms, Agree: agree})
		}
		return true
	})
	return errors.Join(errs...)
}

// campaignParallel is how many runs of a campaign go at once.
const campaignParallel = 2

// runWeighted calls fn(i) for each weight, in order, each in a goroutine of
// its own, with at most n of weight under way at once (so a weight of n
// runs alone), and returns when every call has returned. It starts no
// more calls once ctx has ended or a call has returned false.
func runWeighted(ctx context.Context, n int, weights []int, fn func(i int) bool) {
	sem := make(chan struct{}, n) // one token per unit of weight; only this loop takes them
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i, w := range weights {
		w = min(w, n)
		taken := 0
		for taken < w && ctx.Err() == nil {
			select {
			case sem <- struct{}{}:
				taken++
			case <-ctx.Done():
			}
		}
		if taken < w || failed.Load() || ctx.Err() != nil {
			for range taken {
				<-sem
			}
			break
		}
		wg.Go(func() {
			defer func() {
				for range w {
					<-sem
				}
			}()
			if !fn(i) {
				failed.Store(true)
			}
		})
	}
	wg.Wait()
}
