package testenv

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The machine's test slots: a limit on the heavy work that tests of every
// package, and of every suite running on the machine, do at one time.
//
// A lab run's node processes, a Chromium, a private cluster of servers
// each keep a core busy for a while, and `go test ./...` runs several
// packages at once, each with several parallel tests: unlimited, the
// suite put fifty runnable processes on two cores, and timed code (a
// tick's starting deadline, a lease's TTL) saw a starved machine. A test
// that does such work first calls [Reserve]; the slots are lock files
// (flock) in one directory of the machine's temporary directory, so that
// a second suite beside the first shares the same limit, and a test
// process that dies frees its slots with it.

// EnvSlots overrides the number of slots (default: the number of CPUs,
// at least 2).
const EnvSlots = "AEGIS_TEST_SLOTS"

// slotDirName is the slots' directory under os.TempDir().
const slotDirName = "aegis-test-slots"

// reserved records how many slots each test holds.
var reserved sync.Map // testing.TB → int

// Slots returns how many slots the machine has: $AEGIS_TEST_SLOTS, or
// twice the number of CPUs (at least 4): a lab run's processes spend
// most of a run waiting for their ticks, so two a core keep the machine
// busy without running its nodes late (docs/decisions.md). A malformed
// $AEGIS_TEST_SLOTS counts as unset here and fails Reserve.
func Slots() int {
	n, err := slotsEnv()
	if err != nil || n == 0 {
		return max(4, 2*runtime.NumCPU())
	}
	return n
}

// slotsEnv parses $AEGIS_TEST_SLOTS: 0 when unset.
func slotsEnv() (int, error) {
	v := os.Getenv(EnvSlots)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of test slots", EnvSlots, v)
	}
	return n, nil
}

// Reserve makes sure t holds n of the machine's test slots (at most all
// of them) for the rest of its life; what names the work in messages. The
// first call takes them: it waits until that many are free, in the order
// the tests asked, bounded by the test binary's deadline (-timeout) less a
// minute, or 10 minutes without one, and fails t naming the holders when
// they did not come. A later call asking no more than t holds does
// nothing, so that helpers (a lab session, a browser) can each make sure
// of one; a later call asking more fails t: a test reserves at its start
// all it will run at once, since two tests each holding part of what they
// need could wait for each other forever. For the same reason a parent
// whose parallel subtests reserve holds none itself.
func Reserve(t testing.TB, n int, what string) {
	t.Helper()
	if _, err := slotsEnv(); err != nil {
		t.Fatalf("testenv: %v", err)
		return
	}
	total := Slots()
	n = min(max(n, 1), total)
	if v, ok := reserved.Load(t); ok {
		if held := v.(int); held < n {
			t.Fatalf("testenv: %s holds %d test slots and asks for %d (%s): call testenv.Reserve(t, %d, ...) at the test's start, for everything it runs at once", t.Name(), held, n, what, n)
		}
		return
	}
	bound := 10 * time.Minute
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := tt.Deadline(); ok {
			bound = max(time.Until(d)-time.Minute, 10*time.Second)
		}
	}
	held, waited, err := takeSlots(filepath.Join(os.TempDir(), slotDirName), total, n, t.Name()+" ("+what+")", bound)
	if err != nil {
		t.Fatalf("testenv: %s: %v", t.Name(), err)
	}
	reserved.Store(t, n)
	if waited > time.Second {
		t.Logf("testenv: waited %s for %d of the machine's %d test slots (%s)", waited.Round(time.Millisecond), n, total, what)
	}
	t.Cleanup(func() {
		reserved.Delete(t)
		for _, f := range held {
			_ = f.Close() // closing the file drops its lock
		}
	})
}

// takeSlots locks n of the total slot files in dir for holder, waiting at
// most bound, and returns them open (closing one frees it) and how long
// it waited. Whoever holds the turn file gathers its slots; the others
// wait for the turn, so that a test asking for several is not overtaken
// forever by tests asking for one.
func takeSlots(dir string, total, n int, holder string, bound time.Duration) ([]*os.File, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, 0, fmt.Errorf("test slots: %w", err)
	}
	start := time.Now()
	deadline := start.Add(bound)
	poll := func() bool {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(25 * time.Millisecond) // a poll of a lock held by another process: no event to wait on
		return true
	}
	turn, err := openSlot(filepath.Join(dir, "turn"))
	if err != nil {
		return nil, 0, err
	}
	defer turn.Close()
	for !tryLock(turn) {
		if !poll() {
			return nil, time.Since(start), fmt.Errorf("waited %s for the turn to take %d of the machine's %d test slots (%s=N sets them); held now by: %s",
				bound.Round(time.Millisecond), n, total, EnvSlots, holders(dir, total, nil))
		}
	}
	var held []*os.File
	mine := map[int]bool{} // the slots held has, by number
	release := func() {
		for _, f := range held {
			_ = f.Close()
		}
	}
	for {
		for i := 0; i < total && len(held) < n; i++ {
			f, err := openSlot(filepath.Join(dir, "slot-"+strconv.Itoa(i)))
			if err != nil {
				release()
				return nil, 0, err
			}
			if !tryLock(f) {
				f.Close()
				continue
			}
			_ = f.Truncate(0)
			_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d: %s\n", os.Getpid(), holder)), 0)
			held = append(held, f)
			mine[i] = true
		}
		if len(held) == n {
			return held, time.Since(start), nil
		}
		if !poll() {
			// Who else holds slots is read before ours are given back: a
			// slot freed a moment ago can still read as held (a process
			// forked by another test keeps the lock until it execs).
			others := holders(dir, total, mine)
			release()
			return nil, time.Since(start), fmt.Errorf("waited %s for %d of the machine's %d test slots (%s=N sets them), got %d; held now by: %s",
				bound.Round(time.Millisecond), n, total, EnvSlots, len(held), others)
		}
	}
}

func openSlot(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("test slots: %w", err)
	}
	return f, nil
}

// tryLock takes f's exclusive lock if it is free.
func tryLock(f *os.File) bool {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err == nil
		}
	}
}

// holders says who holds the slots in dir now other than the caller
// (the slots in mine), for a message.
func holders(dir string, total int, mine map[int]bool) string {
	var out []string
	for i := range total {
		if mine[i] {
			continue
		}
		f, err := openSlot(filepath.Join(dir, "slot-"+strconv.Itoa(i)))
		if err != nil {
			continue
		}
		if tryLock(f) { // free: what it says is its last holder's
			f.Close()
			continue
		}
		b, _ := os.ReadFile(f.Name())
		f.Close()
		out = append(out, cmp.Or(strings.TrimSpace(string(b)), "a holder that wrote no name"))
	}
	if len(out) == 0 {
		return "none (they were just freed)"
	}
	return strings.Join(out, "; ")
}
