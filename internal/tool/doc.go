// Package tool holds the parts of the aegis tool, apart from the library:
// the command line (cli), opening a Locker by name from server addresses
// (backend), starting real servers (servers), the tests' connections to
// them (testenv), a TCP proxy for faults (tcpproxy), the benchmarks'
// latency recorder and queue harness (latency, queuebench), the consensus
// backends' loss scenarios (losstest), and the checks that keep the
// documentation's snippets and the contract of docs/design.md compiling
// (docsnippets, contract), and the library's exported API on record in
// api/ (apicheck). The library's own mechanics are in internal.
package tool
