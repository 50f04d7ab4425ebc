// Package dashboard is the Aegis lab's dashboard: one web page, served by
// `aegis lab`, over a [lab.Session]. It starts runs (one strategy, several
// side by side, or a preset), draws each run live — a lane
// group per catalog job, a lane per node in it, ticks as columns, each
// critical section a mark with its token: red when its tick was applied
// twice, amber when the fence refused it ("t10 < t11", the token against
// the one the store held), grey columns for missed ticks; each node's
// lease with its expiry on the server and the successor's grant; each
// job's ledger against its commits; the faults and catalog edits on the
// timeline — shows the holder and its token, the report's counts (each
// defined on hover), the checker's verdict (with porcupine's visualisation
// of a violation), whether the store agrees, what each strategy does not
// guarantee and what to watch; injects faults on demand (pause, kill or
// partition the holder, the writer or a node; a clock skew; a Redis
// failover or restart, a Redlock majority restart, a PostgreSQL crash, an
// etcd or ZooKeeper member killed), edits the run's catalog live, and
// charts a group's comparison.
//
// The page is hand-written HTML, CSS and JavaScript embedded in the
// binary: nothing is fetched from the network. The browser talks to a
// small JSON API and one server-sent event stream that carries every run
// it shows (see stream.go): a browser keeps six connections to a host, so
// a stream per run would starve the page's own requests.
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
