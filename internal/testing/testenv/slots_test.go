package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Slots are held until closed, a request waits for the turn and then for
// its slots, and a request that cannot be served within its bound fails
// naming the holders.
func TestTakeSlots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _, err := takeSlots(dir, 3, 2, "TestA (two runs)", time.Second)
	require.NoError(t, err)
	require.Len(t, a, 2)

	_, waited, err := takeSlots(dir, 3, 2, "TestB (a browser)", 200*time.Millisecond)
	require.Error(t, err, "one slot is free, two were asked for")
	require.GreaterOrEqual(t, waited, 200*time.Millisecond)
	require.ErrorContains(t, err, "waited 200ms for 2 of the machine's 3 test slots (AEGIS_TEST_SLOTS=N sets them), got 1")
	require.ErrorContains(t, err, "TestA (two runs)")
	require.NotContains(t, err.Error(), "TestB", "a request that gave up holds nothing")

	c, _, err := takeSlots(dir, 3, 1, "TestC", time.Second)
	require.NoError(t, err, "the slot B gave back")
	require.Len(t, c, 1)

	// B waits until A's slots are closed, then has them.
	got := make(chan error, 1)
	go func() {
		b, _, err := takeSlots(dir, 3, 2, "TestB", 10*time.Second)
		for _, f := range b {
			f.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("B was served while A held its slots: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	for _, f := range a {
		require.NoError(t, f.Close())
	}
	require.NoError(t, Recv(t, got, 10*time.Second, "B's slots after A closed its own"))
	for _, f := range c {
		require.NoError(t, f.Close())
	}
}

// The slots are shared between processes, and a process that dies frees
// its slots: here a child process takes both and is killed.
func TestSlotsAcrossProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), slotChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 64)
	n, err := out.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "held\n", string(buf[:n]), "the child took its slots")

	_, _, err = takeSlots(dir, 2, 1, "TestParent", 100*time.Millisecond)
	require.ErrorContains(t, err, "slotChild", "both are the child's, and the message names it")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	held, _, err := takeSlots(dir, 2, 2, "TestParent", 10*time.Second)
	require.NoError(t, err, "a dead process's slots are free")
	for _, f := range held {
		f.Close()
	}
}

// slotChildEnv makes the test binary TestSlotsAcrossProcesses's child
// (see TestMain): it takes both slots of the directory the variable
// names, says so and waits to be killed.
const slotChildEnv = "TESTENV_SLOT_CHILD"

func slotChild(dir string) {
	if _, _, err := takeSlots(dir, 2, 2, "slotChild", 10*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("held")
	select {} // killed by the parent
}

// Reserve takes slots for the test and gives them back at its end; a
// second call asking no more does nothing.
func TestReserve(t *testing.T) {
	t.Setenv(EnvSlots, "2")
	t.Setenv("TMPDIR", t.TempDir()) // not the machine's own slots
	require.Equal(t, 2, Slots())
	dir := filepath.Join(os.TempDir(), slotDirName)
	t.Run("takes", func(t *testing.T) {
		Reserve(t, 5, "more than the machine has: all of them")
		_, _, err := takeSlots(dir, 2, 1, "probe", 50*time.Millisecond)
		require.Error(t, err, "the test holds both")
		require.True(t, strings.Contains(err.Error(), "TestReserve/takes (more than the machine has: all of them)"), err.Error())
		Reserve(t, 1, "a helper's own call: the test holds more")
	})
	held, _, err := takeSlots(dir, 2, 2, "probe", time.Minute)
	require.NoError(t, err, "the subtest's end gave them back")
	for _, f := range held {
		f.Close()
	}
}

// fatalRecorder is a test whose Fatalf is recorded, not fatal.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

// A test that asks for more than it holds is told to reserve it all at
// its start.
func TestReserveMoreFails(t *testing.T) {
	t.Setenv(EnvSlots, "3")
	t.Setenv("TMPDIR", t.TempDir())
	r := &fatalRecorder{TB: t}
	Reserve(r, 1, "a lab session")
	require.Empty(t, r.fatal)
	Reserve(r, 2, "a browser beside it")
	require.Equal(t, "testenv: TestReserveMoreFails holds 1 test slots and asks for 2 (a browser beside it): call testenv.Reserve(t, 2, ...) at the test's start, for everything it runs at once", r.fatal)
}

// A malformed slot count fails the test that reserves, naming the
// variable; unset, the machine has two slots a CPU.
func TestReserveMalformedSlots(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	for _, v := range []string{"many", "0", "-2"} {
		t.Setenv(EnvSlots, v)
		r := &fatalRecorder{TB: t}
		Reserve(r, 1, "a lab session")
		require.Equal(t, fmt.Sprintf("testenv: AEGIS_TEST_SLOTS=%q: want a positive number of test slots", v), r.fatal)
	}
	t.Setenv(EnvSlots, "")
	require.Equal(t, max(4, 2*runtime.NumCPU()), Slots())
}
