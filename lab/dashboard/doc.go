// Package dashboard is the Aegis lab's dashboard: one web page, served by
// `aegis lab`, over a [lab.Session]. It starts runs (one strategy, several
// side by side, or a preset from the seeds), draws each run live — a lane
// per node, ticks as columns, each critical section a mark: red when its
// tick was applied twice, amber when the fence refused it, grey columns
// for missed ticks, the faults on the timeline — shows the holder and its
// token, the report's counts, the checker's verdict (with porcupine's
// visualisation of a violation) and what each strategy does not
// guarantee, injects faults on demand (pause the holder, kill a node, a
// partition, a clock step, a Redis failover or restart), and charts the
// aegis preset's table.
//
// The page is hand-written HTML, CSS and JavaScript embedded in the
// binary: nothing is fetched from the network. The browser talks to a
// small JSON API and two server-sent event streams (see stream.go).
//
// Access: a dashboard without a token answers only requests addressed to
// a loopback name (so a web page cannot reach it by rebinding a DNS name
// to 127.0.0.1); with a token (required on any non-loopback address, see
// [Loopback]) every mutating request must carry it in the X-Aegis-Token
// header. Mutating requests are JSON POSTs from the dashboard's own
// origin either way, which another site's page cannot forge. Reading
// (the page, the runs, their events) needs no token.
//
// What it does not do: it runs on the machine it serves from, with that
// machine's lab session; it keeps the last 50 groups of runs in memory and
// nothing on disk but the checker's visualisations; a reload replays each
// run's events from the start.
package dashboard
