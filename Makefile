# The commands a developer and CI run. `make test` starts the shared test
# servers (installing them first when missing, as root), then checks
# formatting, vets, lints and tests every package against those servers.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := $(PATH):/usr/local/go/bin

GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Commands that need the servers get their addresses (AEGIS_*) this way.
WITH_ENV := eval "$$(scripts/services env)" &&

.PHONY: test test-jaeger api fuzz services services-stop lab lab-table lab-campaign lab-lesson lab-marks lab-campaign-safe invoice console-shots bench bench-tracing bench-peers bench-redis bench-queue soak-queue bench-report bench-report-loaded fmt fmt-check vet staticcheck

# Everything in it is built with -race, the aegis command that starts the
# servers, vet's and staticcheck's packages included, so that a cold
# machine compiles the dependencies once, not once for the tests and once
# for the rest (about four minutes on 2 cores). The servers are installed
# and started while vet and staticcheck run: apt waits on the disk and
# the network, they on the CPU.
test: export GOFLAGS := -race
test: export GORACE := atexit_sleep_ms=0
test: fmt-check
	$(GO) build -o /dev/null ./cmd/aegis
	@scripts/services start & services=$$!; \
	status=0; $(MAKE) --no-print-directory vet staticcheck || status=$$?; \
	wait $$services || status=$$?; \
	exit $$status
	$(WITH_ENV) $(GO) test -count=1 -timeout 25m ./...

# The Jaeger tests (examples/jaeger, a module of its own, as tools/jaeger
# is, so that the library's go.mod gains no OTLP exporter nor Jaeger):
# traces exported over OTLP to a real Jaeger all-in-one and read back from
# its query API, the console's links to them, the example exporting to it.
# scripts/services starts Jaeger, building it first when its build is
# missing or tools/jaeger changed: cold, about 10 minutes on 2 cores
# (download and build; README), then seconds. Jaeger stays running
# (scripts/services stop stops it). Not in make test, whose budget the
# build would take; CI runs it after make test.
test-jaeger:
	scripts/services start postgres jaeger
	$(WITH_ENV) cd examples/jaeger && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

# Rewrite api/, the library's exported API on record, from the code
# (internal/testing/apicheck; its test, run by make test, fails when they
# differ). Say the change in CHANGELOG.md.
api:
	$(GO) run ./internal/testing/apicheck -write

# Every fuzz target of the module (func FuzzXxx, found by go test -list,
# so that a new one is not forgotten) for FUZZTIME each, one after the
# other (scripts/fuzz; 25 targets, about 15 minutes at 30s), on the shared
# servers: some targets write what they fuzz to PostgreSQL and SQLite. It
# stops at the first failure and names it; go test has then written the
# failing input to the package's testdata/fuzz/FuzzXxx, which make test
# replays from then on, with every target's seeds.
FUZZTIME ?= 30s
fuzz: services
	$(WITH_ENV) FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz

services:
	scripts/services start

services-stop:
	scripts/services stop

# The Aegis lab's dashboard, the README's main command: open the URL it
# prints; Ctrl-C stops it, its runs and the servers it started. It uses
# the shared etcd, ZooKeeper and NATS; PostgreSQL and Redis are the lab's
# own (started in a moment) so that the presets and buttons that crash,
# fail over, restart or promote them work (crash:postgres, the
# invoice-export-regions preset's standby and promotion, Redis failover):
# the lab never kills or restarts a server it did not start.
# LAB_ADDR=0.0.0.0:7070 serves the network, with a token it prints.
# The binary is built into bin/ and exec'd (not `go run`, which exits 1
# on Ctrl-C and makes make report an error after a clean stop).
LAB_ADDR ?= 127.0.0.1:7070
lab: services
	$(GO) build -o bin/aegis ./cmd/aegis
	$(WITH_ENV) unset AEGIS_REDIS_ADDRS AEGIS_POSTGRES_URL && exec bin/aegis lab --addr $(LAB_ADDR)

# The lab's aegis preset, headless: every strategy, fenced and not, under
# the same pause of the holder; one table. It uses the shared servers (the
# pause is of node processes, not of servers); a violation's visualisation
# goes to $TMPDIR.
lab-table: services
	$(WITH_ENV) $(GO) run ./cmd/aegis lab run --scenario aegis --out "$${TMPDIR:-/tmp}"

# A short seeded campaign (aegis lab campaign): two runs of each strategy
# that needs only SQLite and PostgreSQL, 3 to 5 random faults each, on the
# shared PostgreSQL; a table, and the command line that replays each
# unsafe run. It exits 1 when a strategy the lab labels safe did harm, or
# when more than 10% of the runs are inconclusive.
# SEED=N draws another series. Built and exec'd, so that make exits with
# the campaign's status.
SEED ?= 1
LAB_CAMPAIGN_STRATEGIES := none sqlite pg-lease pg-unique pg-advisory optimistic queue
lab-campaign: services
	$(GO) build -o bin/aegis ./cmd/aegis
	$(WITH_ENV) exec bin/aegis lab campaign --seed $(SEED) --runs 2 $(addprefix --strategy ,$(LAB_CAMPAIGN_STRATEGIES))

# The course's lesson in Chromium, five times over: every fenced lease
# strategy (sqlite, pg-lease, redis, redlock, etcd, zookeeper) side by
# side with the form's defaults, Start, Pause the holder; each run must
# show its refused late write (TestEndToEndLesson; make test runs it once).
# About four minutes on 2 cores, more beside another suite.
LESSON_RUNS ?= 5
lab-lesson: services
	$(WITH_ENV) $(GO) test -count=1 -v -timeout 30m -run '^TestEndToEndLesson$$' ./cmd/aegis/internal/lab/dashboard -lesson-runs $(LESSON_RUNS)

# The mark test on every preset (make test runs it on nightly-reconciliation
# only): each preset run for real, as many at once as the dashboard admits,
# shown in Chromium, every mark the page drew checked against the run's
# events, its report's harm and the store's grant history. About 3 minutes.
lab-marks: services
	$(WITH_ENV) $(GO) test -race -count=1 -run 'TestMarksOfPresets' ./cmd/aegis/internal/lab/dashboard -mark-presets all -timeout 15m -v

# The longer campaign: 20 runs of each strategy that keeps the ledger
# fenced (those labelled safe, and redis and redlock), on the lab's own
# servers, so that the server faults (crash:postgres, kill:etcd, kill:nats, …) are
# drawn too; about half an hour on 2 cores. It exits 1 on a run that
# refutes a label or when more than 10% of the runs are inconclusive
# (they prove nothing: docs/lab.md).
LAB_SAFE_STRATEGIES := sqlite pg-lease pg-unique redis redlock etcd zookeeper nats queue
lab-campaign-safe:
	$(GO) build -o bin/aegis ./cmd/aegis
	exec env -u AEGIS_POSTGRES_URL -u AEGIS_REDIS_ADDRS -u AEGIS_ETCD_ENDPOINTS -u AEGIS_ZK_SERVERS -u AEGIS_NATS_URLS bin/aegis lab campaign --seed $(SEED) --runs 20 $(addprefix --strategy ,$(LAB_SAFE_STRATEGIES))

# Seed 000's invoice export, told step by step against PostgreSQL.
invoice: services
	$(WITH_ENV) $(GO) run ./examples/invoice

# The on-call demo's end-to-end test (examples/oncall: three catalog
# replicas, a lease holder and a queue worker paused, the console in
# Chromium), writing the console's screenshots over it into
# docs/console-overview.png and docs/console-schedule.png. About 20s on
# 2 cores; make test runs it without the screenshots.
console-shots: services
	$(WITH_ENV) AEGIS_CONSOLE_SHOTS=1 $(GO) test -count=1 -run '^TestOnCallConsole$$' ./examples/oncall

# Benchmarks of the library, then against its peers (the bench module).
bench: services
	$(WITH_ENV) $(GO) test -run '^$$' -bench . ./...

# What tracing costs with a sampler that samples nothing, against no
# TracerProvider, at 16 goroutines on PostgreSQL, the arms interleaved:
# acquire+release through tracing.Locker (aegis bench lease --tracing),
# then the queue's enqueue and work (BenchmarkTracing: off and never in
# each of 8 runs, every other run never first, since the arm run first
# meets a colder pool and table; compare the runs pairwise).
bench-tracing: services
	$(WITH_ENV) $(GO) run ./cmd/aegis bench lease --backend postgres --goroutines 16 --tracing --rounds 20 --round 1s
	$(WITH_ENV) for first in off never off never off never off never; do AEGIS_BENCH_TRACING_FIRST=$$first $(GO) test -count=1 -run '^$$' -bench '^BenchmarkTracing$$' -benchtime 3000x ./queue || exit 1; done

bench-peers: services
	$(WITH_ENV) cd bench && $(GO) test -run '^$$' -bench . ./...

# The Redis locks' comparison table (docs/redis.md), subjects interleaved.
bench-redis: services
	$(WITH_ENV) cd bench && $(GO) run ./redis/compare -private -rounds 10 -round 1s -handoffs 300

# The queue against River and graphile-worker on the same server, in one
# run: burn-down of 50,000 no-op jobs (River with its default and a 1 ms
# fetch cooldown, graphile-worker with its local queue; scripts/graphile-worker
# installs it outside the repo) and insert-to-start latency on an idle
# queue. Then the queue's steady soak: enqueue and work at once, jobs/s per
# 10 s window (DURATION=1m for a short check).
DURATION ?= 10m
bench-queue: services
	scripts/graphile-worker install
	$(WITH_ENV) cd bench && $(GO) run ./queue -mode compare,latency -runs 3

soak-queue: services
	$(WITH_ENV) cd bench && $(GO) run ./queue -mode soak -duration $(DURATION)

# The performance report: every bench command in one run (about 13
# minutes), peers beside Aegis on the same servers, rounds interleaved.
# Before each command it waits for idle CPUs (up to three minutes), then
# rewrites the README's Benchmarks part, docs/performance.md and the plots
# in docs/. bench-report-loaded runs the same while every core is kept
# busy; its figures join docs/performance.md at the next stitch.
bench-report: services
	$(WITH_ENV) scripts/bench-report

bench-report-loaded: services
	$(WITH_ENV) scripts/bench-report --loaded

fmt:
	gofmt -w .

fmt-check:
	@files=$$(gofmt -l .); if [ -n "$$files" ]; then echo "not gofmt'ed (run make fmt):"; echo "$$files"; exit 1; fi

vet:
	$(GO) vet ./...

# staticcheck itself is built without the caller's GOFLAGS (make test's
# -race), then checks the packages as they are built (with them).
staticcheck:
	GOFLAGS= GOBIN=$(CURDIR)/bin $(GO) install $(STATICCHECK)
	bin/staticcheck ./...
