// Package natsbench compares natslease with the raw recipe a NATS user
// writes today on the same shared three-server cluster (AEGIS_NATS_URLS):
// one acquire+release of a free key per operation (Subjects), and the
// contended handoff of one key (Subject.Handoff, measured by
// bench/redis's Handoff). The command ./compare prints the tables with
// the ratios; its test runs every subject once so that it cannot rot.
package natsbench
