// Package architecture holds only a test: docs/architecture.md's table of
// the module's packages and their layers, checked against the imports that
// `go list` reports, so that the picture cannot go stale.
package architecture
