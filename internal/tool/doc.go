// Package tool holds the aegis command's subcommands (cli). The rig of the
// tests, the benchmarks and the lab is in internal/testing.
package tool
