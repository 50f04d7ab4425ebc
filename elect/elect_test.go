package elect_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/internal/testing/testenv"
	"github.com/aegislab/aegis/lease/pglease"
)

func TestMain(m *testing.M) {
	if url := os.Getenv("ELECT_CHILD_URL"); url != "" {
		os.Exit(child(url, os.Getenv("ELECT_CHILD_NODE")))
	}
	goleak.VerifyTestMain(m)
}

// store is one candidate's connection to the test's schema: a pool of its
// own, as a separate process would have.
type store struct {
	pool   *pgxpool.Pool
	db     *sql.DB
	locker *pglease.Locker
	board  *elect.SQLBoard
}

func newStore(t testing.TB, url string) *store {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close(); pool.Close() })
	locker, err := pglease.New(pool, nil)
	require.NoError(t, err)
	board, err := elect.NewSQLBoard(ctx, db, nil)
	require.NoError(t, err)
	return &store{pool: pool, db: db, locker: locker, board: board}
}

func candidate(t testing.TB, s *store, name, node string, ttl time.Duration) *elect.Election {
	e, err := elect.New(s.locker, name, &elect.Config{Node: node, TTL: ttl, Board: s.board, Poll: ttl / 5})
	require.NoError(t, err)
	return e
}

// campaignWithin is e.Campaign(ctx) with a bound: the test fails when e does not
// lead within d. ctx bounds the term, as it does for Campaign.
func campaignWithin(t testing.TB, ctx context.Context, e *elect.Election, d time.Duration) *elect.Leadership {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	type result struct {
		l   *elect.Leadership
		err error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := e.Campaign(ctx)
		ch <- result{l, err}
	}()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.l
	case <-time.After(d):
		cancel()
		t.Fatalf("%s did not lead within %s", e.Node(), d)
		return nil
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.PostgresURL(t))
	tests := []struct {
		name string
		cfg  elect.Config
		want string
	}{
		{"", elect.Config{}, "elect: name is empty"},
		{strings.Repeat("x", elect.MaxNameLen+1), elect.Config{}, "elect: name is 195 bytes, at most 194"},
		{"bad\x00name", elect.Config{}, "NUL byte"},
		{"ok", elect.Config{Node: strings.Repeat("n", 101)}, `elect: Config.Node "` + strings.Repeat("n", 40) + `"… is 101 bytes`},
		{"ok", elect.Config{TTL: -time.Second}, "elect: Config.TTL: aegis: invalid argument: ttl -1s is not positive"},
		{"ok", elect.Config{TTL: 25 * time.Hour}, "elect: Config.TTL"},
		{"ok", elect.Config{TTL: time.Millisecond}, "elect: Config.TTL: aegis: invalid argument: ttl 1ms is not longer than its clock-drift margin"},
		{"ok", elect.Config{TTL: 5 * time.Millisecond}, "elect: Config.TTL 5ms is shorter than 10ms"},
		{"ok", elect.Config{Poll: -time.Second}, "elect: Config.Poll -1s is shorter than 1ms"},
		{"ok", elect.Config{Poll: time.Microsecond}, "elect: Config.Poll 1µs is shorter than 1ms"},
	}
	invalid := func(err error, want string) {
		t.Helper()
		require.ErrorIs(t, err, aegis.ErrInvalid, want)
		require.ErrorContains(t, err, want)
	}
	for _, tt := range tests {
		_, err := elect.New(s.locker, tt.name, &tt.cfg)
		invalid(err, tt.want)
	}
	_, err := elect.New(nil, "x", nil)
	invalid(err, "elect: locker is nil")
	e, err := elect.New(s.locker, "x", nil)
	require.NoError(t, err)
	_, err = e.Observe(t.Context())
	invalid(err, "Config.Board is not set")
	_, err = elect.NewSQLBoard(t.Context(), s.db, &elect.BoardConfig{Table: "no good"})
	invalid(err, "elect: BoardConfig.Table")
	_, err = elect.NewSQLBoard(t.Context(), nil, nil)
	invalid(err, "elect: NewSQLBoard: db is nil")
	_, err = elect.NewSQLBoardFromPool(t.Context(), nil, nil)
	invalid(err, "elect: NewSQLBoardFromPool: pool is nil")
	_, err = elect.NewSQLBoardFromPool(t.Context(), s.pool, &elect.BoardConfig{Table: "a.b.c"})
	invalid(err, "elect: BoardConfig.Table")
}

// Three candidates campaign again and again on separate pools: never two
// leaders at once, and each term's token is greater than the last.
func TestOnlyOneLeader(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	const ttl = 500 * time.Millisecond
	var (
		active atomic.Int32
		mu     sync.Mutex
		tokens []aegis.Token
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 3 {
		e := candidate(t, newStore(t, url), "only-one", fmt.Sprintf("node-%d", i), ttl)
		wg.Go(func() {
			for ctx.Err() == nil {
				lead, err := e.Campaign(ctx)
				if err != nil {
					return
				}
				if n := active.Add(1); n != 1 {
					t.Errorf("%d leaders at once", n)
				}
				mu.Lock()
				tokens = append(tokens, lead.Token())
				done := len(tokens) >= 12
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the term's work
				active.Add(-1)
				if err := lead.Resign(ctx); err != nil {
					t.Error(err)
				}
				if done {
					cancel()
				}
			}
		})
	}
	testenv.Wait(t, &wg, time.Minute, "twelve terms")
	require.GreaterOrEqual(t, len(tokens), 12)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "term tokens increase: %v", tokens)
	}
}

// Observe sees the first leader, its resignation's successor with a greater
// token, and no leader once every candidate is gone.
func TestObserve(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	const ttl = 600 * time.Millisecond
	a := candidate(t, newStore(t, url), "observed", "node-a", ttl)
	b := candidate(t, newStore(t, url), "observed", "node-b", ttl)
	obs := candidate(t, newStore(t, url), "observed", "observer", ttl)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := obs.Observe(ctx)
	require.NoError(t, err)
	next := func() elect.Leader {
		select {
		case l := <-ch:
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no leader change observed within 5s")
			return elect.Leader{}
		}
	}
	require.Equal(t, elect.Leader{}, next(), "nobody leads yet")

	leadA := campaignWithin(t, t.Context(), a, 10*time.Second)
	got := next()
	require.Equal(t, "node-a", got.Node)
	require.Equal(t, leadA.Token(), got.Token)

	bLeads := make(chan *elect.Leadership, 1)
	go func() {
		l, err := b.Campaign(t.Context())
		if err != nil {
			t.Error(err)
		}
		bLeads <- l
	}()
	require.NoError(t, leadA.Resign(t.Context()))
	leadB := testenv.Recv(t, bLeads, 10*time.Second, "B to lead after A resigned")
	require.Greater(t, leadB.Token(), leadA.Token())
	for got = next(); got.Node == ""; got = next() {
		// a poll between the withdrawal and B's record sees no leader
	}
	require.Equal(t, elect.Leader{Node: "node-b", Token: leadB.Token(), Since: got.Since}, got)
	require.NoError(t, leadB.Resign(t.Context()))
	require.Equal(t, elect.Leader{}, next())
	cancel()
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("Observe's channel was not closed within 5s of its ctx's end")
		}
	}
}

// lateLocker delivers a grant late, as a long queue or a pause would: its
// Acquire returns a lease only after another candidate has been granted the
// key. Campaign must check and not report leadership.
type lateLocker struct {
	aegis.Locker
	once  sync.Once
	taken chan struct{} // closed by the test once another candidate leads
	stale chan aegis.Token
}

func (l *lateLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	var late *aegis.Lease
	l.once.Do(func() {
		lease, err := aegis.Acquire(ctx, l.Locker, key, ttl)
		if err != nil {
			return
		}
		l.stale <- lease.Token
		select {
		case <-l.taken:
		case <-ctx.Done():
			return
		}
		late = lease
	})
	if late != nil {
		return late, nil
	}
	return aegis.Acquire(ctx, l.Locker, key, ttl)
}

func TestCampaignVerifiesAfterWaiting(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	const ttl = 300 * time.Millisecond
	s := newStore(t, url)
	late := &lateLocker{Locker: s.locker, taken: make(chan struct{}), stale: make(chan aegis.Token, 1)}
	slow, err := elect.New(late, "late", &elect.Config{Node: "slow", TTL: ttl})
	require.NoError(t, err)
	other := candidate(t, newStore(t, url), "late", "other", ttl)

	result := make(chan *elect.Leadership, 1)
	go func() {
		l, err := slow.Campaign(t.Context())
		if err != nil {
			t.Error(err)
			return
		}
		result <- l
	}()
	staleToken := testenv.Recv(t, late.stale, 10*time.Second, "the slow candidate's first grant")
	// The stale grant expires (nobody renews it); the other candidate wins.
	leadOther := campaignWithin(t, t.Context(), other, 10*time.Second)
	require.Greater(t, leadOther.Token(), staleToken)
	close(late.taken)
	select {
	case l := <-result:
		t.Fatalf("leadership reported from a stale grant, token %d", l.Token())
	case <-time.After(3 * ttl):
	}
	require.NoError(t, leadOther.Resign(t.Context()))
	select {
	case l := <-result:
		require.Greater(t, l.Token(), leadOther.Token())
		require.NoError(t, l.Resign(t.Context()))
	case <-time.After(5 * time.Second):
		t.Fatal("the slow candidate did not lead after the other resigned")
	}
}

// The leader's writes are fenced with the term token: a deposed leader's
// write is rejected once its successor has written.
func TestLeaderWritesAreFenced(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	const ttl = 300 * time.Millisecond
	s1, s2 := newStore(t, url), newStore(t, url)
	require.NoError(t, fence.MigrateSQL(t.Context(), s1.db))
	first := campaignWithin(t, t.Context(), candidate(t, s1, "fenced", "first", ttl), 10*time.Second)
	write := func(db *sql.DB, token aegis.Token) error {
		tx, err := db.BeginTx(t.Context(), nil)
		require.NoError(t, err)
		defer tx.Rollback()
		if err := fence.CheckSQL(t.Context(), tx, "leader/fenced", token); err != nil {
			return err
		}
		return tx.Commit()
	}
	require.NoError(t, write(s1.db, first.Token()))
	// The first leader's store connection "stalls": its lease expires
	// unrenewed. Simulate by releasing behind its back through the store.
	_, err := s1.pool.Exec(t.Context(), `UPDATE aegis_lease SET expires_at = now() WHERE key = 'elect:fenced'`)
	require.NoError(t, err)
	second := campaignWithin(t, t.Context(), candidate(t, s2, "fenced", "second", ttl), 10*time.Second)
	require.Greater(t, second.Token(), first.Token())
	require.NoError(t, write(s2.db, second.Token()))
	require.ErrorIs(t, write(s1.db, first.Token()), aegis.ErrStale, "the deposed leader's write")
	require.Eventually(t, func() bool { return first.Context().Err() != nil }, 10*time.Second, 10*time.Millisecond,
		"the deposed leader's context is cancelled at its next renewal")
	require.ErrorIs(t, context.Cause(first.Context()), aegis.ErrLost)
	require.ErrorIs(t, first.Resign(t.Context()), aegis.ErrLost)
	require.NoError(t, second.Resign(t.Context()))
}

// child is a candidate process: it campaigns and, while it leads, writes
// through the fence every 20ms, printing what happens.
func child(url, node string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	locker, err := pglease.New(pool, nil)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	cfg := &elect.Config{Node: node, TTL: 600 * time.Millisecond}
	if os.Getenv("ELECT_CHILD_BOARD") != "" {
		if cfg.Board, err = elect.NewSQLBoardFromPool(ctx, pool, nil); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
	}
	e, err := elect.New(locker, "processes", cfg)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	lead, err := e.Campaign(ctx)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("LEADER", lead.Token())
	if cfg.Board != nil { // it leads, publishing its record, until killed
		<-lead.Context().Done()
		fmt.Println("LOST", lead.Token())
		return 0
	}
	for {
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			err = fence.CheckSQL(ctx, tx, "leader/processes", lead.Token())
			if err == nil {
				_, err = tx.ExecContext(ctx, "INSERT INTO leader_writes (node, token) VALUES ($1, $2)", node, int64(lead.Token()))
			}
			if err == nil {
				err = tx.Commit()
			}
			tx.Rollback()
		}
		if errors.Is(err, aegis.ErrStale) {
			fmt.Println("STALE", lead.Token())
			return 0
		}
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		select {
		case <-lead.Context().Done():
			fmt.Println("LOST", lead.Token())
			return 0
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// proc is a child candidate process and the lines it printed.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
}

func startChild(t *testing.T, url, node string, env ...string) *proc {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ELECT_CHILD_URL="+url, "ELECT_CHILD_NODE="+node)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// expect waits for the next line of p and returns its fields.
func (p *proc) expect(t *testing.T, d time.Duration) []string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		require.True(t, ok, "the process exited without a line")
		require.NotContains(t, line, "ERROR")
		return strings.Fields(line)
	case <-time.After(d):
		t.Fatalf("no line from the process within %s", d)
		return nil
	}
}

// firstLeader waits until one of ps prints LEADER and returns it and its
// token.
func firstLeader(t *testing.T, d time.Duration, ps ...*proc) (*proc, aegis.Token) {
	t.Helper()
	deadline := time.After(d)
	for {
		for _, p := range ps {
			select {
			case line := <-p.lines:
				f := strings.Fields(line)
				require.Equal(t, "LEADER", f[0], line)
				tok, err := strconv.ParseInt(f[1], 10, 64)
				require.NoError(t, err)
				return p, aegis.Token(tok)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no leader within %s", d)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Real processes: killing the leader elects another with a greater term
// token; pausing one (SIGSTOP) past its lease elects another too, and when
// the first resumes (SIGCONT) its in-flight work is cancelled or fenced:
// no write of its lands after its successor's first.
func TestLeaderProcesses(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	s := newStore(t, url)
	require.NoError(t, fence.MigrateSQL(t.Context(), s.db))
	_, err := s.db.ExecContext(t.Context(), `CREATE TABLE leader_writes (id bigserial PRIMARY KEY, node text NOT NULL, token bigint NOT NULL)`)
	require.NoError(t, err)
	// Let every child migrate before the race: they share the schema.
	_, err = pglease.New(s.pool, nil)
	require.NoError(t, err)

	a, b := startChild(t, url, "a"), startChild(t, url, "b")
	leader, t1 := firstLeader(t, 15*time.Second, a, b)
	other := map[*proc]*proc{a: b, b: a}[leader]

	require.NoError(t, leader.cmd.Process.Kill())
	_ = leader.cmd.Wait()
	f := other.expect(t, 10*time.Second)
	require.Equal(t, "LEADER", f[0])
	t2, _ := strconv.ParseInt(f[1], 10, 64)
	require.Greater(t, aegis.Token(t2), t1, "the successor's term token is greater")

	// Pause the new leader past its lease; a third candidate takes over.
	c := startChild(t, url, "c")
	require.NoError(t, other.cmd.Process.Signal(syscall.SIGSTOP))
	f = c.expect(t, 10*time.Second)
	require.Equal(t, "LEADER", f[0])
	t3, _ := strconv.ParseInt(f[1], 10, 64)
	require.Greater(t, t3, t2)
	// The paused leader may hold its fence row's lock in an open
	// transaction (paused mid-write), which blocks the new leader's write
	// until it resumes: resume it now.
	require.NoError(t, other.cmd.Process.Signal(syscall.SIGCONT))
	f = other.expect(t, 5*time.Second)
	require.Contains(t, []string{"LOST", "STALE"}, f[0], "the resumed leader stops: %v", f)
	var firstOfC int64
	require.Eventually(t, func() bool {
		err := s.db.QueryRowContext(t.Context(), `SELECT coalesce(min(id), 0) FROM leader_writes WHERE token = $1`, t3).Scan(&firstOfC)
		return err == nil && firstOfC > 0
	}, 5*time.Second, 10*time.Millisecond, "the third leader writes")
	var late int
	require.NoError(t, s.db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM leader_writes WHERE token = $1 AND id > $2`, t2, firstOfC).Scan(&late))
	require.Zero(t, late, "no write of the deposed leader landed after its successor's")
}

// A leader process killed (SIGKILL) publishes nothing more and withdraws
// nothing: an observer with Poll an hour sees it lead, then sees no leader
// once its record expires, woken by the record's expiry it had read.
func TestObserveKilledLeader(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	s := newStore(t, url)
	obs, err := elect.New(s.locker, "processes", &elect.Config{Node: "observer", TTL: time.Minute, Poll: time.Hour, Board: s.board})
	require.NoError(t, err)
	ch, _ := observing(t, obs)

	p := startChild(t, url, "doomed", "ELECT_CHILD_BOARD=1")
	f := p.expect(t, 15*time.Second)
	require.Equal(t, "LEADER", f[0])
	got := testenv.Recv(t, ch, 10*time.Second, "the child's leadership observed (Poll 1h)")
	require.Equal(t, "doomed", got.Node)
	require.Equal(t, f[1], strconv.FormatInt(int64(got.Token), 10))

	require.NoError(t, p.cmd.Process.Kill())
	_ = p.cmd.Wait()
	// Until then a refresh late on a loaded machine may have let the
	// record lapse and come back: the same leader, seen again.
	for {
		got := testenv.Recv(t, ch, 10*time.Second, "the killed leader's record expiring observed (Poll 1h, TTL 600ms)")
		if got == (elect.Leader{}) {
			break
		}
		require.Equal(t, "doomed", got.Node)
	}
}
