package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis/internal/testing/queuebench"
)

// graphileRunner is the Node side of graphile-worker's burn-down.
//
//go:embed graphile.cjs
var graphileRunner []byte

// graphileScript installs graphile-worker (scripts/graphile-worker, run
// from the bench module's folder by default); set by a flag.
var graphileScript = "../scripts/graphile-worker"

// graphileDir is where scripts/graphile-worker installs the package.
func graphileDir() string {
	if d := os.Getenv("AEGIS_GRAPHILE_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "aegis", "graphile-worker")
}

// ensureGraphile installs graphile-worker when it is missing (the script is
// idempotent and quick when it is installed) and writes the runner next to
// it; it returns the runner's path.
func ensureGraphile(ctx context.Context) (string, error) {
	dir := graphileDir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "graphile-worker", "package.json")); err != nil {
		cmd := exec.CommandContext(ctx, graphileScript, "install")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("install graphile-worker with %s install: %w", graphileScript, err)
		}
	}
	path := filepath.Join(dir, "aegis-bench.cjs")
	if err := os.WriteFile(path, graphileRunner, 0o644); err != nil {
		return "", fmt.Errorf("write the graphile-worker runner: %w", err)
	}
	return path, nil
}

// graphileResult is what the runner prints last.
type graphileResult struct {
	Version      string    `json:"version"`
	JobsPerSec   float64   `json:"jobs_per_sec"`
	InsertPerSec float64   `json:"insert_per_sec"`
	PerSecond    []float64 `json:"per_second"`
	Handled      int       `json:"handled"`
	Polls        int64     `json:"polls"`
}

// graphileVersion is the installed version, once a run reported it.
var graphileVersion string

// burnGraphile is queuebench.BurnDown for graphile-worker: a schema of its
// own on the same server, concurrency = workers, its local queue (batched
// fetching, size workers+1) and batched completions, the same pool size;
// jobs inserted first with addJobs, then the time until the table is empty.
// The runner waits between the insert and the work for the cost's first
// reading; its connections (application_name: the schema) are counted once
// they are gone.
func burnGraphile(ctx context.Context, url string, jobs, workers int, limit time.Duration) (queuebench.Result, error) {
	runner, err := ensureGraphile(ctx)
	if err != nil {
		return queuebench.Result{}, err
	}
	cfg, drop, err := queuebench.Schema(ctx, url, "graphile_bench")
	if err != nil {
		return queuebench.Result{}, err
	}
	defer drop()
	schema := cfg.ConnConfig.RuntimeParams["search_path"]
	cfg.ConnConfig.RuntimeParams["application_name"] = schema + "_cost" // the runner's are schema
	cfg.MaxConns, cfg.MinConns = 1, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return queuebench.Result{}, err
	}
	defer pool.Close()
	cmd := exec.CommandContext(ctx, "node", runner,
		"--schema", schema, "--jobs", strconv.Itoa(jobs), "--concurrency", strconv.Itoa(workers),
		"--pool", strconv.Itoa(queuebench.PoolSize), "--local-queue", strconv.Itoa(workers+1),
		"--insert-batch", "10000", "--for", strconv.FormatFloat(limit.Seconds(), 'f', 3, 64))
	// The URL (it may hold a password) goes through the environment, not argv.
	cmd.Env = append(os.Environ(), "AEGIS_GRAPHILE_URL="+url, "PGAPPNAME="+schema)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return queuebench.Result{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return queuebench.Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return queuebench.Result{}, fmt.Errorf("graphile-worker runner: %w", err)
	}
	failed := func(err error) (queuebench.Result, error) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return queuebench.Result{}, fmt.Errorf("graphile-worker runner: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || !strings.Contains(line, `"ready"`) {
		return failed(fmt.Errorf("printed %q before its jobs were inserted (%v)", line, err))
	}
	// The insert's connections gone (their counts with them), the work
	// phase begins.
	if _, err := queuebench.WaitBackendsGone(ctx, pool, schema); err != nil {
		return failed(err)
	}
	cost := queuebench.StartCost(ctx, pool)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return failed(err)
	}
	last, err := io.ReadAll(out)
	if err != nil {
		return failed(err)
	}
	if err := cmd.Wait(); err != nil {
		return queuebench.Result{}, fmt.Errorf("graphile-worker runner: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var r graphileResult
	if err := json.Unmarshal(last, &r); err != nil {
		return queuebench.Result{}, fmt.Errorf("graphile-worker runner printed %q: %w", last, err)
	}
	if r.JobsPerSec <= 0 {
		return queuebench.Result{}, errors.New("graphile-worker runner reported no throughput")
	}
	waits, err := queuebench.WaitBackendsGone(ctx, pool, schema)
	if err != nil {
		return queuebench.Result{}, err
	}
	perJob, err := cost.Stop(ctx, r.Handled, r.Polls+waits)
	if err != nil {
		return queuebench.Result{}, err
	}
	graphileVersion = r.Version
	return queuebench.Result{
		Jobs: jobs, Workers: workers,
		JobsPerSec:   float64(int64(r.JobsPerSec*10+0.5)) / 10,
		InsertPerSec: float64(int64(r.InsertPerSec*10+0.5)) / 10,
		PerSecond:    r.PerSecond,
		Cost:         perJob,
	}, nil
}
