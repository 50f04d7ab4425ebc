package testenv

import (
	"os"
	"path/filepath"
	"strconv"
)

// PidAlive reports whether process pid runs; a zombie (exited, not yet
// reaped) counts as gone. Tests use it to check that a lab or a dashboard
// left no node process behind.
func PidAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain them: look after the last ')'.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}
