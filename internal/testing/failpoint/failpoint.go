// Package failpoint makes the statements of the protocol fail on purpose,
// on real servers, for the failpoint tests of the queue, the scheduler
// and the fence: a Plan arms rules, each naming the statements it fails
// (by a fragment of their SQL) and how. The three faults are the ways a
// write of the protocol fails in production:
//
//   - Before: the connection breaks before the statement is sent. Nothing
//     runs; the error says it is safe to retry (pgconn.SafeToRetry).
//   - After: the statement runs and commits (in a transaction: the
//     transaction's COMMIT runs), then the connection breaks: the caller
//     gets an error and no reply, and the write has landed.
//   - Data: the server refuses the statement for its data. The wrapper
//     sends the server a statement that the server refuses with a real data
//     error in place of the armed one (PostgreSQL: SQLSTATE 22021, as for a
//     NUL in a text; SQLite: SQLITE_TOOBIG), so the caller gets the error
//     its driver makes, and nothing of the statement runs.
//
// The faults are made in the client, below the code under test and above
// the driver: DB wraps a database/sql connector (PostgreSQL through pgx's
// stdlib driver, or SQLite), Pgx a pgx pool (or anything with its query
// methods and Begin). The servers are real; only the break is simulated.
package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// Fault is how an armed statement fails.
type Fault int

const (
	// Before: the connection breaks before the statement is sent.
	Before Fault = iota + 1
	// After: the statement commits, then its reply is lost.
	After
	// Data: the server refuses the statement for its data.
	Data
)

// Faults are the three faults, in the order the failpoint tables list them.
var Faults = []Fault{Before, After, Data}

func (f Fault) String() string {
	switch f {
	case Before:
		return "before"
	case After:
		return "after"
	case Data:
		return "data"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Data errors the wrappers make the server return: a real refusal of the
// server, of the class a text the server cannot store gets.
const (
	PostgresDataError = `SELECT convert_from('\x00'::bytea, 'UTF8')` // 22021 character_not_in_repertoire
	SQLiteDataError   = `SELECT zeroblob(2000000000)`                // SQLITE_TOOBIG
)

// Plan is a set of armed rules. Its methods are safe for concurrent use,
// also while the wrapped handles run statements.
type Plan struct {
	mu    sync.Mutex
	rules []*rule
	ran   map[string]int // statements seen, by the name of a Watch
	watch map[string]string
}

type rule struct {
	name  string
	match string
	fault Fault
	left  int
	fired int
}

// NewPlan returns a plan with no rule armed.
func NewPlan() *Plan { return &Plan{ran: map[string]int{}, watch: map[string]string{}} }

// Arm makes the next n statements whose SQL contains match fail with
// fault f. name labels the rule in errors and in Fired. An earlier rule
// of the same name is replaced.
func (p *Plan) Arm(name, match string, f Fault, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = slicesDeleteName(p.rules, name)
	p.rules = append(p.rules, &rule{name: name, match: match, fault: f, left: n})
}

// Disarm stops every rule from failing more statements (Fired still
// counts what they failed).
func (p *Plan) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		r.left = 0
	}
}

// Fired reports how many statements the rule name has failed so far (0
// when no such rule is armed).
func (p *Plan) Fired(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.name == name {
			return r.fired
		}
	}
	return 0
}

// Watch counts, under name, the statements whose SQL contains match that
// the wrapped handles are asked to run, failed or not (see Ran).
func (p *Plan) Watch(name, match string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watch[name] = match
}

// Ran reports how many statements the Watch name has counted.
func (p *Plan) Ran(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ran[name]
}

// take returns the rule that fails query, if one is armed and has fires
// left, counting the fire; and counts the watched statements.
func (p *Plan) take(query string) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, m := range p.watch {
		if strings.Contains(query, m) {
			p.ran[name]++
		}
	}
	for _, r := range p.rules {
		if r.left > 0 && strings.Contains(query, r.match) {
			r.left--
			r.fired++
			return r
		}
	}
	return nil
}

func slicesDeleteName(rs []*rule, name string) []*rule {
	out := rs[:0]
	for _, r := range rs {
		if r.name != name {
			out = append(out, r)
		}
	}
	return out
}

// Error is the error of a Before or an After fault: a broken connection.
type Error struct {
	Rule  string
	Fault Fault
}

func (e *Error) Error() string {
	if e.Fault == Before {
		return fmt.Sprintf("failpoint %s: connection broken before the statement was sent", e.Rule)
	}
	return fmt.Sprintf("failpoint %s: connection broken after the statement committed: its reply is lost", e.Rule)
}

// SafeToRetry reports whether nothing was sent (pgconn.SafeToRetry reads
// it): true for Before only.
func (e *Error) SafeToRetry() bool { return e.Fault == Before }

// isCommit and isBegin recognise the transaction statements a caller
// sends as text (SQLite's BEGIN IMMEDIATE … COMMIT through a connection).
func isCommit(query string) bool {
	q := strings.ToUpper(strings.TrimSpace(query))
	return q == "COMMIT" || q == "END" || strings.HasPrefix(q, "COMMIT ")
}

func isBegin(query string) bool {
	return strings.HasPrefix(strings.ToUpper(strings.TrimSpace(query)), "BEGIN")
}

func isRollback(query string) bool {
	return strings.HasPrefix(strings.ToUpper(strings.TrimSpace(query)), "ROLLBACK")
}

// Row is a row of the failpoint table of docs/failpoints.md: the
// package, the statement, the fault and what happens.
func Row(pkg, stmt string, f Fault, result string) string {
	return fmt.Sprintf("| %s | %s | %s | %s |", pkg, stmt, f, result)
}

// CheckDoc fails t unless the table of the document at path has exactly
// the rows want for package pkg, in that order: the table says what the
// tests assert.
func CheckDoc(t testing.TB, path, pkg string, want []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the failpoint table: %v", err)
	}
	var got []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| "+pkg+" | ") {
			got = append(got, line)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s: the rows of %s are not what its failpoint tests assert; they should be:\n%s", path, pkg, strings.Join(want, "\n"))
	}
}
