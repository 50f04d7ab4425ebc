package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"

	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/testing/backend"
	"github.com/aegislab/aegis/internal/testing/servers"
	"github.com/aegislab/aegis/internal/testing/tcpproxy"
	"github.com/aegislab/aegis/lease/sqlitelease"
	"github.com/aegislab/aegis/schedule"
)

// Servers are existing servers for the lab to use. A kind left empty is
// started by the lab itself, the first time a run needs it.
type Servers struct {
	PostgresURL   string   // AEGIS_POSTGRES_URL, --postgres-url
	RedisAddrs    []string // AEGIS_REDIS_ADDRS, --redis-addrs; the first is the single-node one
	EtcdEndpoints []string // AEGIS_ETCD_ENDPOINTS, --etcd-endpoints
	ZKServers     []string // AEGIS_ZK_SERVERS, --zk-servers
	NATSURLs      []string // AEGIS_NATS_URLS, --nats-urls (nats://host:port each)
}

// Options configures a Session. The zero value starts every server the
// runs need in a temporary directory.
type Options struct {
	// Dir is the scratch directory for the servers the lab starts and the
	// SQLite files. Default: a new temporary directory, removed by Close.
	Dir string
	// Servers are existing servers to use instead of starting them. The
	// lab never kills, pauses or restarts a server it did not start:
	// faults that would (failover:redis, restart:redis, crash:postgres,
	// kill:etcd, kill:zookeeper, kill:nats) need the lab's own server of
	// that kind.
	Servers Servers
	// Executable is the program whose `node` subcommand runs a node.
	// Default: os.Executable() (the aegis command).
	Executable string
	// NodeEnv are extra NAME=value variables for node processes.
	NodeEnv []string
	// Log receives progress lines (servers starting, nodes restarted).
	// Default: none.
	Log io.Writer
}

// Session is a lab session: the servers it started (reused across its
// runs, stopped by Close) and its store of record. Runs of one session
// may run at the same time, but only one at a time may have faults that
// kill, restart or fail over one kind of server (a second is refused):
// the servers are shared, so such a fault also reaches the other runs.
//
// The PostgreSQL it starts is durable (fsync, synchronous_commit and
// full_page_writes on), so that crash:postgres tests crash recovery and
// loses nothing committed; its etcd, ZooKeeper and NATS have 3 members,
// so that one can be killed under a quorum.
type Session struct {
	opts    Options
	dir     string
	tempDir bool

	mu          sync.Mutex
	pg          *servers.Postgres
	standby     *servers.Postgres // a hot standby of pg: a second region, for Config.Standby
	standbyMu   sync.Mutex        // serializes its start
	fenced      *servers.Postgres // the primary a promote:standby stopped (pg is its standby, promoted); wiped for the next standby
	redis       []*servers.Redis
	replica     *servers.Redis  // of redis[0], for failover:redis
	replLink    *tcpproxy.Proxy // the replication link, through which replica follows redis[0]
	etcd        *servers.Etcd
	zk          *servers.ZooKeeper
	nats        *servers.NATS
	unavailable map[servers.Kind]error
	store       *sql.DB
	storeURL    string // a PostgreSQL URL, or sqlite:PATH
	closed      bool
	busy        map[servers.Kind]*Run // the run whose faults kill, restart or fail over the kind's servers
	runs        map[*Run]struct{}
}

// NewSession returns a session; it starts no server until a run needs
// one.
func NewSession(opts Options) (*Session, error) {
	s := &Session{opts: opts, unavailable: map[servers.Kind]error{}, busy: map[servers.Kind]*Run{}, runs: map[*Run]struct{}{}}
	if s.opts.Log == nil {
		s.opts.Log = io.Discard
	}
	if s.opts.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("lab: find the aegis executable: %w", err)
		}
		s.opts.Executable = exe
	}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "aegis-lab-")
		if err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		s.dir, s.tempDir = dir, true
	} else {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		s.dir = dir
	}
	return s, nil
}

// Dir returns the session's scratch directory.
func (s *Session) Dir() string { return s.dir }

// Close stops the runs still going (and waits for them), stops the servers
// the session started and removes its temporary directory.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var runs []*Run
	for r := range s.runs {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.Stop()
		<-r.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	var stops []func() error
	for _, p := range []*servers.Postgres{s.standby, s.fenced} {
		if p != nil {
			stops = append(stops, p.Stop)
		}
	}
	if s.pg != nil {
		stops = append(stops, s.pg.Stop)
	}
	for _, r := range append(slices.Clone(s.redis), s.replica) {
		if r != nil {
			stops = append(stops, r.Stop)
		}
	}
	if s.etcd != nil {
		stops = append(stops, s.etcd.Stop)
	}
	if s.zk != nil {
		stops = append(stops, s.zk.Stop)
	}
	if s.nats != nil {
		stops = append(stops, s.nats.Stop)
	}
	if s.replLink != nil {
		stops = append(stops, s.replLink.Close)
	}
	var wg sync.WaitGroup
	stopErrs := make([]error, len(stops))
	for i, stop := range stops {
		wg.Go(func() { stopErrs[i] = stop() })
	}
	wg.Wait()
	errs = append(errs, stopErrs...)
	if s.tempDir {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}

// given reports whether the kind's servers were given in Options.
func (s *Session) given(k servers.Kind) bool {
	g := s.opts.Servers
	switch k {
	case servers.KindPostgres:
		return g.PostgresURL != ""
	case servers.KindRedis:
		return len(g.RedisAddrs) > 0
	case servers.KindEtcd:
		return len(g.EtcdEndpoints) > 0
	case servers.KindZooKeeper:
		return len(g.ZKServers) > 0
	case servers.KindNATS:
		return len(g.NATSURLs) > 0
	}
	return false
}

// ensure starts the servers of kind unless they were given or already
// started. It returns the MissingError (or start error) when they cannot
// run; the error is remembered, so a missing program is looked for once.
func (s *Session) ensure(ctx context.Context, k servers.Kind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("lab: session closed")
	}
	if s.given(k) {
		return nil
	}
	if err, ok := s.unavailable[k]; ok {
		return err
	}
	var err error
	switch k {
	case servers.KindPostgres:
		if s.pg != nil {
			return nil
		}
		fmt.Fprintf(s.opts.Log, "lab: starting a durable PostgreSQL in %s\n", s.dir)
		s.pg, err = servers.StartPostgres(ctx, filepath.Join(s.dir, "postgres"), &servers.PostgresConfig{Durable: true})
	case servers.KindRedis:
		if s.redis != nil {
			return nil
		}
		fmt.Fprintf(s.opts.Log, "lab: starting 6 Redis primaries and a replica of the first in %s\n", s.dir)
		err = s.startRedis(ctx)
	case servers.KindEtcd:
		if s.etcd != nil {
			return nil
		}
		fmt.Fprintf(s.opts.Log, "lab: starting a 3-member etcd cluster in %s\n", s.dir)
		s.etcd, err = servers.StartEtcd(ctx, filepath.Join(s.dir, "etcd"), &servers.EtcdConfig{Members: 3})
	case servers.KindZooKeeper:
		if s.zk != nil {
			return nil
		}
		fmt.Fprintf(s.opts.Log, "lab: starting a 3-member ZooKeeper ensemble in %s\n", s.dir)
		s.zk, err = servers.StartZooKeeper(ctx, filepath.Join(s.dir, "zookeeper"), &servers.ZooKeeperConfig{Members: 3})
	case servers.KindNATS:
		if s.nats != nil {
			return nil
		}
		fmt.Fprintf(s.opts.Log, "lab: starting a 3-server NATS cluster with JetStream in %s\n", s.dir)
		s.nats, err = servers.StartNATS(ctx, filepath.Join(s.dir, "nats"), &servers.NATSConfig{Members: 3})
	}
	if err != nil {
		if servers.IsMissing(err) {
			s.unavailable[k] = err
		}
		return err
	}
	return nil
}

// startRedis starts six primaries (the first is the single-node one,
// Redlock uses them all) and a replica of the first. The caller holds mu.
func (s *Session) startRedis(ctx context.Context) error {
	cfg := &servers.RedisConfig{Config: map[string]string{"enable-debug-command": "local"}}
	var rs []*servers.Redis
	stop := func() {
		for _, r := range rs {
			_ = r.Stop()
		}
	}
	for i := range 6 {
		r, err := servers.StartRedis(ctx, filepath.Join(s.dir, fmt.Sprintf("redis-%d", i+1)), cfg)
		if err != nil {
			stop()
			return err
		}
		rs = append(rs, r)
	}
	// The replica follows the primary through a proxy, so that a failover
	// can cut replication before a grant: a paused replica would still
	// receive the grant into its socket buffer.
	link, err := tcpproxy.New(rs[0].Addr())
	if err != nil {
		stop()
		return err
	}
	replica, err := servers.StartRedis(ctx, filepath.Join(s.dir, "redis-replica"), &servers.RedisConfig{ReplicaOf: link.Addr(), Config: cfg.Config})
	if err != nil {
		link.Close()
		stop()
		return err
	}
	s.redis, s.replica, s.replLink = rs, replica, link
	return nil
}

// serverAddrs returns the addresses of kind's servers (started or given).
func (s *Session) serverAddrs(k servers.Kind) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.opts.Servers
	switch k {
	case servers.KindPostgres:
		if g.PostgresURL != "" {
			return []string{g.PostgresURL}
		}
		if s.pg != nil {
			return []string{s.pg.URL()}
		}
	case servers.KindRedis:
		if len(g.RedisAddrs) > 0 {
			return g.RedisAddrs
		}
		var a []string
		for _, r := range s.redis {
			a = append(a, r.Addr())
		}
		return a
	case servers.KindEtcd:
		if len(g.EtcdEndpoints) > 0 {
			return g.EtcdEndpoints
		}
		if s.etcd != nil {
			return s.etcd.Endpoints()
		}
	case servers.KindZooKeeper:
		if len(g.ZKServers) > 0 {
			return g.ZKServers
		}
		if s.zk != nil {
			return s.zk.Addrs()
		}
	case servers.KindNATS:
		if len(g.NATSURLs) > 0 {
			return g.NATSURLs
		}
		if s.nats != nil {
			return s.nats.URLs()
		}
	}
	return nil
}

// openStore opens the store of record: PostgreSQL when the lab has it
// (given, or installed so that it can start it), else SQLite in the
// scratch directory.
func (s *Session) openStore(ctx context.Context) (*sql.DB, string, error) {
	s.mu.Lock()
	if s.store != nil {
		defer s.mu.Unlock()
		return s.store, s.storeURLLocked(), nil
	}
	s.mu.Unlock()
	url := ""
	if err := s.ensure(ctx, servers.KindPostgres); err == nil {
		url = s.serverAddrs(servers.KindPostgres)[0]
	} else if !servers.IsMissing(err) {
		return nil, "", err
	}
	var db *sql.DB
	var err error
	switch {
	case url != "" && !s.given(servers.KindPostgres):
		db, err = s.openOwnStore(url)
	case url != "":
		db, err = sql.Open("pgx", url)
	default:
		path := filepath.Join(s.dir, "store.db")
		url = "sqlite:" + path
		db, err = sqlitelease.Open(path)
	}
	if err != nil {
		if !strings.HasPrefix(url, "sqlite:") {
			return nil, "", backend.PostgresError("open the store,", url, err)
		}
		return nil, "", fmt.Errorf("lab: open the store: %w", err)
	}
	if !strings.HasPrefix(url, "sqlite:") {
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, "", backend.PostgresError("connect to the store,", url, err)
		}
	}
	if err := lab.MigrateStore(ctx, db); err != nil {
		db.Close()
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store != nil { // a concurrent run opened it first
		db.Close()
		return s.store, s.storeURLLocked(), nil
	}
	s.store, s.storeURL = db, url
	return db, url, nil
}

// storeURLLocked returns the store of record's URL: the lab's own
// PostgreSQL's now (a promotion moves it to the standby), or the one it
// was opened at. Caller holds mu.
func (s *Session) storeURLLocked() string {
	if s.pg != nil && !strings.HasPrefix(s.storeURL, "sqlite:") {
		return s.pg.URL()
	}
	return s.storeURL
}

// openOwnStore opens the lab's own PostgreSQL at url as the store of
// record, each new connection made to the server that is its primary at
// the time: after a promotion, the standby promoted (promoted closes the
// idle connections to the old one).
func (s *Session) openOwnStore(url string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg, stdlib.OptionBeforeConnect(func(_ context.Context, c *pgx.ConnConfig) error {
		s.mu.Lock()
		addr := s.pg.Addr()
		s.mu.Unlock()
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return err
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return err
		}
		c.Host, c.Port = host, uint16(p)
		return nil
	})), nil
}

// Availability says whether strategy can run in this session: nil, or an
// error that says what is missing and how to get it. It starts the
// servers the strategy needs (which is how it finds out).
func (s *Session) Availability(ctx context.Context, strategy string) error {
	st, ok := lab.LookupStrategy(strategy)
	if !ok {
		return badinput.Errorf("unknown strategy %q (known: %s)", strategy, strings.Join(lab.StrategyNames(), ", "))
	}
	if st.Mode == schedule.ModeLease && !st.LabLocked() && !slices.Contains(backend.Names(), st.Backend) {
		return fmt.Errorf("the %s backend is not in this build of aegis (internal/testing/backend has %s)", st.Backend, strings.Join(backend.Names(), ", "))
	}
	for _, k := range st.Needs {
		if err := s.ensure(ctx, k); err != nil {
			return err
		}
	}
	if _, url, err := s.openStore(ctx); err != nil {
		return err
	} else if st.NeedsPostgresStore() && strings.HasPrefix(url, "sqlite:") {
		return fmt.Errorf("%s runs its SQL in the store of record, which is SQLite here: PostgreSQL is missing", st.Name)
	}
	return nil
}

// flags names the flag and variable that give the kind's servers.
var flags = map[servers.Kind]string{
	servers.KindPostgres:  "--postgres-url and AEGIS_POSTGRES_URL",
	servers.KindRedis:     "--redis-addrs and AEGIS_REDIS_ADDRS",
	servers.KindEtcd:      "--etcd-endpoints and AEGIS_ETCD_ENDPOINTS",
	servers.KindZooKeeper: "--zk-servers and AEGIS_ZK_SERVERS",
	servers.KindNATS:      "--nats-urls and AEGIS_NATS_URLS",
}

// admitChaos refuses a fault this session cannot inflict: one that would
// kill or restart a server the lab did not start, or reach a PostgreSQL
// it does not have (its store of record is SQLite). The strategy's part is
// Config.checkChaos.
func (s *Session) admitChaos(ch lab.Chaos) error {
	if k, ok := ch.ServerKind(); ok && s.given(k) {
		return badinput.Errorf("--chaos %s kills or restarts %s, and the lab never touches servers it did not start: leave %s unset so that it starts its own", ch, serverName(k), flags[k])
	}
	s.mu.Lock()
	sqlite := strings.HasPrefix(s.storeURL, "sqlite:")
	s.mu.Unlock()
	if sqlite && (ch.Kind == lab.Crash || (ch.Kind == lab.Partition && ch.Server == string(servers.KindPostgres))) {
		return badinput.Errorf("--chaos %s: the store of record is SQLite here (PostgreSQL is not installed) and the strategy uses no PostgreSQL: there is none to reach", ch)
	}
	return nil
}

func serverName(k servers.Kind) string {
	return map[servers.Kind]string{
		servers.KindPostgres:  "the PostgreSQL server",
		servers.KindRedis:     "a Redis server",
		servers.KindEtcd:      "an etcd member",
		servers.KindZooKeeper: "a ZooKeeper member",
		servers.KindNATS:      "a NATS server",
	}[k]
}

// The session's admission of faults: the lab's servers are one per
// session, shared by its runs, so a fault that kills, restarts or fails
// over a server must be the only run on it. The CLI and the dashboard both
// go through here (Start, Inject, Admit).

// faulted lists the servers c's faults kill, restart or fail over.
func faulted(cs []lab.Chaos) []servers.Kind {
	var ks []servers.Kind
	for _, ch := range cs {
		if k, ok := ch.ServerKind(); ok && !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// usesLocked reports whether a run of c uses server k: its strategy's,
// or PostgreSQL as the store of record. Caller holds mu.
func (s *Session) usesLocked(c lab.Config, k servers.Kind) bool {
	st, _ := lab.LookupStrategy(c.Strategy)
	if slices.Contains(st.Needs, k) {
		return true
	}
	return k == servers.KindPostgres && s.storeURL != "" && !strings.HasPrefix(s.storeURL, "sqlite:")
}

var serverTitle = map[servers.Kind]string{servers.KindPostgres: "PostgreSQL", servers.KindRedis: "Redis", servers.KindEtcd: "etcd", servers.KindZooKeeper: "ZooKeeper", servers.KindNATS: "NATS"}

// conflictLocked says why runs cs cannot go now beside the session's live
// runs (self, when not nil, is one of them and adds its injected faults
// ch): "" when they can. Caller holds mu.
func (s *Session) conflictLocked(self *Run, cs []lab.Config, ch []lab.Chaos) string {
	for _, c := range cs {
		for k, owner := range s.busy {
			if owner != self && s.usesLocked(c, k) {
				return fmt.Sprintf("run %s has failed over or restarted the lab's %s (or will: its faults do), which stays so until it ends: a %s run started now would find its server gone; wait for it to end or stop it", owner.ID, serverTitle[k], c.Strategy)
			}
		}
	}
	for i, c := range cs {
		kinds := faulted(c.Chaos)
		if self != nil {
			kinds = faulted(ch)
		}
		for _, k := range kinds {
			for other := range s.runs {
				if other != self && s.usesLocked(other.cfg, k) {
					return fmt.Sprintf("run %s (%s) uses the lab's %s too, and a fault that kills, restarts or fails it over would pull it from under that run as well: stop it first, or fault a run that is alone", other.ID, other.cfg.Strategy, serverTitle[k])
				}
			}
			for j, c2 := range cs {
				if j != i && s.usesLocked(c2, k) {
					return fmt.Sprintf("a run with a fault that kills, restarts or fails over the lab's %s must be the only %s run going: the others would lose their server too", serverTitle[k], serverTitle[k])
				}
			}
		}
	}
	return ""
}

// Admit says whether runs cs can start now, side by side, beside the
// session's live runs: nil, or an error that says what is in the way (a
// fault that kills a server another run uses, a server held by a run that
// faulted it).
func (s *Session) Admit(cs []lab.Config) error {
	for _, c := range cs {
		for _, ch := range c.Chaos {
			if err := s.admitChaos(ch); err != nil {
				return err
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.conflictLocked(nil, cs, nil); why != "" {
		return errors.New(why)
	}
	return nil
}

// admit admits a run about to start, registers it and holds the servers
// its faults kill, in one step.
func (s *Session) admit(r *Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("lab: session closed")
	}
	if why := s.conflictLocked(nil, []lab.Config{r.cfg}, nil); why != "" {
		return errors.New(why)
	}
	s.runs[r] = struct{}{}
	for _, k := range faulted(r.cfg.Chaos) {
		s.busy[k] = r
	}
	return nil
}

// hold reserves, for a fault injected into r, the server it kills,
// restarts or fails over (if any), once no other run uses it. It fails
// once r has ended (then release has run or is about to, and would not
// see the hold).
func (s *Session) hold(r *Run, ch lab.Chaos) error {
	k, ok := ch.ServerKind()
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ending() {
		return errors.New("the run has ended")
	}
	if owner := s.busy[k]; owner != nil && owner != r {
		return fmt.Errorf("another run of this session has a fault that kills or restarts %s (%s): run one at a time", serverName(k), owner.ID)
	}
	if why := s.conflictLocked(r, []lab.Config{r.cfg}, []lab.Chaos{ch}); why != "" {
		return errors.New(why)
	}
	s.busy[k] = r
	return nil
}

// release gives back every server r holds.
func (s *Session) release(r *Run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.busy, func(_ servers.Kind, owner *Run) bool { return owner == r })
}

// startStandby returns the hot standby of the lab's own PostgreSQL,
// started the first time a run asks (pg_basebackup, then streaming): the
// second region of a run with Config.Standby.
func (s *Session) startStandby(ctx context.Context) (*servers.Postgres, error) {
	s.standbyMu.Lock()
	defer s.standbyMu.Unlock()
	s.mu.Lock()
	primary, standby := s.pg, s.standby
	s.mu.Unlock()
	switch {
	case standby != nil:
		return standby, nil
	case primary == nil:
		return nil, badinput.Errorf("--standby needs the lab's own PostgreSQL (a hot standby is made from it): leave --postgres-url and AEGIS_POSTGRES_URL unset")
	}
	dir := filepath.Join(s.dir, "postgres-standby")
	s.mu.Lock()
	fenced := s.fenced
	s.mu.Unlock()
	if fenced != nil {
		// After a promotion the old primary's directory holds data the new
		// timeline left behind: a new base backup replaces it.
		if err := fenced.Wipe(); err != nil {
			return nil, fmt.Errorf("lab: wipe the primary a promotion stopped: %w", err)
		}
		dir = fenced.Dir()
	}
	fmt.Fprintf(s.opts.Log, "lab: starting a hot standby of PostgreSQL in %s\n", dir)
	// Durable as its primary: promoted, it is the store of record, which
	// crash:postgres tests for crash recovery.
	standby, err := servers.StartStandby(ctx, dir, primary, &servers.PostgresConfig{Durable: true})
	if err != nil {
		return nil, fmt.Errorf("lab: start the hot standby: %w", err)
	}
	s.mu.Lock()
	s.standby, s.fenced = standby, nil
	s.mu.Unlock()
	return standby, nil
}

// promoted records that the standby is the lab's PostgreSQL now and
// old, stopped, its fenced former primary; the store of record's idle
// connections to old are closed, so that the next ones reach the standby.
func (s *Session) promoted(old *servers.Postgres) {
	s.mu.Lock()
	s.pg, s.standby, s.fenced = s.standby, nil, old
	db := s.store
	s.mu.Unlock()
	if db != nil {
		db.SetMaxIdleConns(0)
		db.SetMaxIdleConns(storeIdleConns)
	}
}

// storeIdleConns is how many idle connections the store of record keeps:
// database/sql's default.
const storeIdleConns = 2
