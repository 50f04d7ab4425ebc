// Package lab is the Aegis lab engine: it runs a scenario with real node
// processes against real servers, injects real faults, and checks what
// reached the store of record.
package lab
