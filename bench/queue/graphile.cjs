// The graphile-worker side of the queue benchmark (bench/queue/graphile.go
// writes this file next to the installed package and runs it with node).
//
// A burn-down timed like the aegis and River ones: migrate a schema of its
// own, insert the no-op jobs first in bulk (addJobs), then start a worker
// pool and time until every job ran and its completion left the table.
// Settings: concurrency = the workers of the other systems, the local queue
// (batched fetching) of size concurrency + 1 as graphile-worker's docs
// recommend, batched completions (completeJobBatchDelay 0), the same pool
// size. The connection string comes from the environment (never argv).
//
// Prints {"ready": true} on stdout once the jobs are inserted, waits for a
// line on stdin, works them, then prints one JSON object on stdout; errors
// go to stderr with exit 1.
"use strict";

const { run, runMigrations, makeWorkerUtils, Logger } = require("graphile-worker");
const { Client } = require("pg");

function arg(name) {
  const i = process.argv.indexOf("--" + name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error("missing --" + name);
  return process.argv[i + 1];
}

const quiet = new Logger(() => (level, message) => {
  if (level === "error") process.stderr.write("graphile-worker: " + message + "\n");
});

async function main() {
  const connectionString = process.env.AEGIS_GRAPHILE_URL;
  if (!connectionString) throw new Error("AEGIS_GRAPHILE_URL is not set");
  const schema = arg("schema");
  const jobs = Number(arg("jobs"));
  const concurrency = Number(arg("concurrency"));
  const poolSize = Number(arg("pool"));
  const localQueue = Number(arg("local-queue"));
  const batch = Number(arg("insert-batch"));
  // --for S > 0: stop after S seconds and report the jobs handled over S
  // (a backlog too deep to drain in the time), like queuebench.Drain.
  const limitMs = Number(arg("for")) * 1000;

  const preset = {
    worker: {
      connectionString,
      schema,
      concurrentJobs: concurrency,
      maxPoolSize: poolSize,
      pollInterval: 1000,
      logger: quiet,
      localQueue: { size: localQueue },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  };
  await runMigrations({ connectionString, schema, logger: quiet });

  const utils = await makeWorkerUtils({ connectionString, schema, logger: quiet });
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < jobs; i += batch) {
    const specs = [];
    for (let j = i; j < Math.min(jobs, i + batch); j++) specs.push({ identifier: "noop", payload: { n: j } });
    await utils.addJobs(specs);
  }
  const insertS = Number(process.hrtime.bigint() - t0) / 1e9;
  await utils.release();
  // The Go side reads the server's counters between the insert and the
  // work (queuebench.Cost): it says go on stdin once it has.
  process.stdout.write(JSON.stringify({ ready: true }) + "\n");
  await new Promise((resolve, reject) => {
    process.stdin.once("data", resolve);
    process.stdin.once("end", () => reject(new Error("stdin closed before go")));
  });
  process.stdin.pause();

  const probe = new Client({ connectionString });
  await probe.connect();

  let handled = 0;
  const perSecond = [];
  let last = 0;
  const start = process.hrtime.bigint();
  const second = setInterval(() => {
    perSecond.push(handled - last);
    last = handled;
  }, 1000);
  const runner = await run({
    preset,
    noHandleSignals: true,
    taskList: {
      noop: async () => {
        handled++;
      },
    },
  });
  // Like queuebench.Drain: wait for the handlers (cheap, in-process), then
  // for the table to be empty (the completions written), polling every ms.
  const elapsed = () => Number(process.hrtime.bigint() - start) / 1e9;
  let limited = false;
  await new Promise((resolve) => {
    const t = setInterval(() => {
      if (limitMs > 0 && elapsed() * 1000 >= limitMs) limited = true;
      if (handled >= jobs || limited) {
        clearInterval(t);
        resolve();
      }
    }, 1);
  });
  let rate;
  let polls = 0;
  if (limited) {
    rate = handled / elapsed();
  } else {
    const left = `SELECT EXISTS (SELECT 1 FROM ${JSON.stringify(schema)}._private_jobs)`;
    for (;;) {
      polls++;
      const r = await probe.query(left);
      if (!r.rows[0].exists) break;
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    rate = jobs / elapsed();
  }
  clearInterval(second);
  perSecond.push(handled - last);
  await runner.stop();
  await probe.end();
  const version = JSON.parse(
    require("fs").readFileSync(require("path").join(__dirname, "node_modules/graphile-worker/package.json"), "utf8"),
  ).version;
  process.stdout.write(
    JSON.stringify({
      version,
      jobs,
      workers: concurrency,
      jobs_per_sec: rate,
      handled,
      polls,
      insert_per_sec: jobs / insertS,
      per_second: perSecond,
    }) + "\n",
  );
}

main().catch((err) => {
  process.stderr.write("graphile bench: " + (err && err.message ? err.message : String(err)) + "\n");
  process.exit(1);
});
