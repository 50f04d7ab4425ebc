// Package owner makes the random owner ids of lease grants.
package owner

import (
	"crypto/rand"
	"encoding/hex"
)

// New returns a random 128-bit owner id, hex encoded. Every grant gets its
// own, so two processes on one host, or two grants in one process, never
// share one. For Redis it is the secret that release compares: never log it.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
