// Package node names the process a scheduler or an election candidate runs
// in.
package node

import (
	"fmt"
	"os"
	"unicode/utf8"
)

// MaxLen is the longest node name, in bytes.
const MaxLen = 100

// Default returns "HOSTNAME-PID": unique among the processes of one host,
// readable in a run row or a leader record.
func Default() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	name := fmt.Sprintf("%s-%d", host, os.Getpid())
	if len(name) > MaxLen {
		name = name[len(name)-MaxLen:]
	}
	return name
}

// Check reports whether name is a usable node name: non-empty, at most
// MaxLen bytes of UTF-8 without NUL. field names the config field in the
// error.
func Check(field, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", field)
	case len(name) > MaxLen:
		return fmt.Errorf("%s is %d bytes, at most %d are allowed", field, len(name), MaxLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return fmt.Errorf("%s contains a NUL byte", field)
		}
	}
	return nil
}
