// Package testing holds the rig that the tests, the benchmarks and the lab
// stand on, apart from the library and the aegis program: real servers
// (servers) and the tests' connections to them, bounded waits and machine
// slots (testenv); a TCP proxy for partitions (tcpproxy); a headless
// Chromium (chromium); a Locker opened by name from server addresses
// (backend); failpoints on the protocol's statements (failpoint); the
// consensus backends' loss scenarios (losstest) and the row leases' test
// helpers (rowleasetest); real schedulers that leave a history
// (historytest); the benchmarks' latency recorder and queue harness
// (latency, queuebench); the alert rules' promtool test (alerts); and the
// checks that keep the docs' snippets, the contract of docs/design.md, the
// exported API on record and the layers of docs/architecture.md true
// (docsnippets, contract, apicheck, architecture).
//
// The library never imports it; the program imports the parts the lab and
// `aegis bench` run on (servers, tcpproxy, backend, queuebench,
// latency/measure). The library's own mechanics are in internal.
//
// The package's name is its folder's; it holds this text alone and nothing
// imports it, so it never meets the standard library's testing.
package testing
