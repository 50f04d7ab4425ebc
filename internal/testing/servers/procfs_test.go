package servers

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// WaitStopped returns once every thread of a process is stopped after
// SIGSTOP, once one runs again after SIGCONT, and at once for a process
// that is gone.
func TestWaitStopped(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	pid := cmd.Process.Pid
	state := func() bool {
		t.Helper()
		stopped, gone, err := threadsStopped(pid)
		require.NoError(t, err)
		require.False(t, gone)
		return stopped
	}
	require.False(t, state(), "a sleeping process is not stopped")

	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.NoError(t, WaitStopped(t.Context(), pid, true, 10*time.Second))
	require.True(t, state(), "WaitStopped returned before the stop")
	require.ErrorContains(t, WaitStopped(t.Context(), pid, false, 20*time.Millisecond), "still stopped",
		"a stopped process does not read as running")

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	require.NoError(t, WaitStopped(t.Context(), pid, false, 10*time.Second))
	require.False(t, state(), "WaitStopped returned before the process ran again")

	require.NoError(t, cmd.Process.Kill())
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("sleep did not exit within 10s of SIGKILL")
	}
	require.NoError(t, WaitStopped(t.Context(), pid, true, time.Second), "a process that is gone")
}
