package servers

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// KindJaeger is Jaeger all-in-one: not in [Kinds], since its first build
// takes minutes (see [BuildJaeger]); it starts only when named.
const KindJaeger Kind = "jaeger"

// The environment variables that tell the Jaeger tests and the example
// where the shared Jaeger is.
const (
	EnvJaegerOTLP  = "AEGIS_JAEGER_OTLP_ENDPOINT" // http://127.0.0.1:4318, OTLP over HTTP
	EnvJaegerQuery = "AEGIS_JAEGER_QUERY_URL"     // http://127.0.0.1:16686, its UI and query API
)

// The shared Jaeger's ports: Jaeger's own defaults, so that an OTLP
// exporter's default endpoint and the UI's usual address reach it.
const (
	sharedJaegerOTLP      = 4318
	sharedJaegerQuery     = 16686
	sharedJaegerQueryGRPC = 16685
)

// JaegerModule is the Go module, relative to the repository's root, that
// pins the Jaeger version [BuildJaeger] builds (a tool directive).
const JaegerModule = "tools/jaeger"

// jaegerPackage is the all-in-one's main package.
const jaegerPackage = "github.com/jaegertracing/jaeger/cmd/jaeger"

// SharedJaegerConfig returns the configuration of the shared Jaeger that
// `scripts/services start jaeger` starts: detached, OTLP over HTTP on
// 127.0.0.1:4318, the UI and query API on 127.0.0.1:16686 (its gRPC
// query API on 16685).
func SharedJaegerConfig(binary string) *JaegerConfig {
	return &JaegerConfig{Binary: binary, OTLPPort: sharedJaegerOTLP, QueryPort: sharedJaegerQuery, QueryGRPCPort: sharedJaegerQueryGRPC, Detach: true}
}

// SharedJaegerEnv returns the variables that point at the shared Jaeger,
// as `aegis services env` prints them while it runs.
func SharedJaegerEnv() [][2]string {
	return [][2]string{
		{EnvJaegerOTLP, "http://" + hostPort(sharedJaegerOTLP)},
		{EnvJaegerQuery, "http://" + hostPort(sharedJaegerQuery)},
	}
}

// JaegerConfig configures [StartJaeger].
type JaegerConfig struct {
	// Binary is the path of the all-in-one program ([BuildJaeger]'s).
	// Required.
	Binary string
	// OTLPPort is the OTLP over HTTP receiver's port on 127.0.0.1, the
	// server's address. Default: a free port.
	OTLPPort int
	// QueryPort is the UI's and the HTTP query API's port on 127.0.0.1;
	// QueryGRPCPort the gRPC query API's. Default: free ports.
	QueryPort, QueryGRPCPort int
	// Detach runs the server in its own session, so that it outlives the
	// caller, and makes the start idempotent (see [RedisConfig.Detach]).
	// Default: false.
	Detach bool
	// StartTimeout bounds the wait for its OTLP receiver to take an
	// export. Default: 60 s.
	StartTimeout time.Duration
}

// Jaeger is a Jaeger all-in-one server keeping traces in memory (the
// newest 10,000): a restart starts empty. Its address is its OTLP over
// HTTP receiver's. Built from the Go module, its UI is a placeholder page
// (the UI's assets are built apart); its query API is whole.
type Jaeger struct {
	*Proc
	queryPort int
}

// QueryURL returns the base URL of its UI and HTTP query API, such as
// http://127.0.0.1:16686 (a trace's page is QueryURL()+"/trace/"+id, its
// JSON QueryURL()+"/api/traces/"+id).
func (j *Jaeger) QueryURL() string { return "http://" + hostPort(j.queryPort) }

// OTLPEndpoint returns the URL that an OTLP over HTTP exporter sends to,
// such as http://127.0.0.1:4318.
func (j *Jaeger) OTLPEndpoint() string { return "http://" + j.Addr() }

// StartJaeger starts Jaeger all-in-one with its configuration and log in
// dir, on loopback, and returns once its OTLP receiver takes an export
// (the query API starts before the receivers). Its errors name what is
// wrong: a missing Binary, a port taken, the end of its log when it does
// not start.
func StartJaeger(ctx context.Context, dir string, cfg *JaegerConfig) (*Jaeger, error) {
	c := JaegerConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.StartTimeout = cmp.Or(c.StartTimeout, 60*time.Second)
	if c.Binary == "" {
		return nil, fmt.Errorf("servers: JaegerConfig.Binary is empty: build it with BuildJaeger (scripts/services start jaeger does)")
	}
	if _, err := os.Stat(c.Binary); err != nil {
		return nil, fmt.Errorf("servers: JaegerConfig.Binary: %w", err)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var given []int // all three, or none: free ones
	if c.OTLPPort != 0 || c.QueryPort != 0 || c.QueryGRPCPort != 0 {
		given = []int{c.OTLPPort, c.QueryPort, c.QueryGRPCPort}
		if slices.Contains(given, 0) {
			return nil, fmt.Errorf("servers: JaegerConfig's OTLPPort, QueryPort and QueryGRPCPort go together: set all three, or none")
		}
	}
	for attempt := 1; ; attempt++ {
		ports, picked, err := pickPorts("JaegerConfig's ports", given, 3)
		if err != nil {
			return nil, err
		}
		j := newJaeger(dir, ports, c)
		err = j.startOrAdopt(ctx)
		if err == nil {
			return j, nil
		}
		if !picked || attempt == 3 || !isPortConflict(err) {
			return nil, err
		}
	}
}

func newJaeger(dir string, ports []int, c JaegerConfig) *Jaeger {
	j := &Jaeger{Proc: &Proc{
		kind:       KindJaeger,
		name:       nameFor(KindJaeger, dir),
		dir:        dir,
		addr:       hostPort(ports[0]),
		ports:      ports,
		detach:     c.Detach,
		timeout:    c.StartTimeout,
		stopSignal: syscall.SIGTERM,
	}, queryPort: ports[1]}
	j.command = func(context.Context) (*exec.Cmd, error) {
		conf := filepath.Join(dir, "jaeger.yaml")
		if err := os.WriteFile(conf, []byte(jaegerConf(ports)), 0o644); err != nil {
			return nil, err
		}
		return exec.Command(c.Binary, "--config", conf), nil
	}
	j.wipe = func() error { return errUnsupported } // a restart empties it
	return j
}

// jaegerConf is the all-in-one's configuration (an OpenTelemetry
// Collector's): the OTLP over HTTP receiver, memory storage, the query
// API and UI, each on loopback only, and no other port (the embedded
// all-in-one configuration opens a dozen on every interface).
func jaegerConf(ports []int) string {
	return fmt.Sprintf(`# Written by aegis on every start; edits are lost.
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memory_store
    enable_tracing: false
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
`, hostPort(ports[1]), hostPort(ports[2]), hostPort(ports[0]))
}

// probeJaeger sends an empty OTLP export to the receiver at addr, which
// answers 200 once the pipeline runs.
func probeJaeger(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/traces", strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("jaeger: an empty OTLP export got %s", resp.Status)
	}
	return nil
}

// JaegerBinary returns the path that [BuildJaeger] builds Jaeger
// all-in-one at from the tool module in module (see [JaegerModule]): in
// cacheDir, named with a hash of the module's go.mod and go.sum, so that
// a new version is built once and an unchanged one never again. It does
// not say whether the file exists.
func JaegerBinary(module, cacheDir string) (string, error) {
	return toolBinary("jaeger", JaegerModule, module, cacheDir)
}

// BuildJaeger returns [JaegerBinary]'s path, building it when the file is
// missing with the go command on PATH (without the caller's GOFLAGS, such
// as make test's -race), which writes its output to log; older builds in
// cacheDir are removed. The first build downloads and compiles for
// several minutes on 2 cores; it ends with ctx.
func BuildJaeger(ctx context.Context, module, cacheDir string, log io.Writer) (string, error) {
	return buildTool(ctx, "jaeger", JaegerModule, jaegerPackage, module, cacheDir, log)
}

// toolBinary is the path of the build of name from the tool module in
// module (its name in the repository: modName): in cacheDir, named with a
// hash of the module's go.mod and go.sum.
func toolBinary(name, modName, module, cacheDir string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(module, f))
		if err != nil {
			return "", fmt.Errorf("servers: %s: %w (the tool module is %s, from the repository's root)", name, err, modName)
		}
		h.Write(b)
	}
	return filepath.Abs(filepath.Join(cacheDir, name+"-"+hex.EncodeToString(h.Sum(nil))[:16]))
}

// buildTool builds pkg of the tool module in module at toolBinary's path
// unless it is there, and removes the older builds of name in cacheDir.
func buildTool(ctx context.Context, name, modName, pkg, module, cacheDir string, log io.Writer) (string, error) {
	bin, err := toolBinary(name, modName, module, cacheDir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("servers: build %s: %w", name, err)
	}
	tmp := fmt.Sprintf("%s.building-%d", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, pkg)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(log, &out)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("servers: build %s in %s: %w\n%s", name, module, err, lastLines(out.String(), 20))
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("servers: build %s: %w", name, err)
	}
	old, _ := filepath.Glob(filepath.Join(cacheDir, name+"-*"))
	for _, o := range old {
		if o != bin && !strings.Contains(o, ".building-") { // another build may be under way
			_ = os.Remove(o)
		}
	}
	return bin, nil
}
