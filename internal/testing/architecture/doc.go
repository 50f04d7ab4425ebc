// Package architecture holds only tests: docs/architecture.md's table of
// the module's packages and their layers, and its parts (the library, the
// rig, the program, the examples), checked against the imports that
// `go list` reports; and README.md's map of the repository checked against
// the tree, so that neither picture can go stale.
package architecture
