package servers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Probe checks once, within ctx, that the server of kind at addr serves,
// as the Start functions and [Inspect] do: PostgreSQL accepts a login as
// postgres, Redis answers PING, an etcd member reports a healthy cluster,
// a ZooKeeper member serves, a NATS server serves JetStream (its cluster
// has a meta leader), Jaeger's OTLP receiver takes an export.
func Probe(ctx context.Context, kind Kind, addr string) error { return probe(ctx, kind, addr) }

// probe checks once that the server of kind at addr serves: PostgreSQL
// accepts a login, Redis answers PING, an etcd member reports a healthy
// cluster (it has a leader), a ZooKeeper member serves (it is in a quorum,
// or standalone).
func probe(ctx context.Context, kind Kind, addr string) error {
	switch kind {
	case KindPostgres:
		return probePostgres(ctx, addr)
	case KindRedis:
		return probeRedis(ctx, addr)
	case KindEtcd:
		return probeEtcd(ctx, addr)
	case KindZooKeeper:
		return probeZooKeeper(ctx, addr)
	case KindNATS:
		return probeNATS(ctx, addr)
	case KindJaeger:
		return probeJaeger(ctx, addr)
	}
	return fmt.Errorf("unknown kind %q", kind)
}

func probePostgres(ctx context.Context, addr string) error {
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=2")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// RedisCommand sends one command to the Redis server at addr and returns
// its reply as text: a status or error line as is ("PONG", "ERR ..."), a
// bulk string's content, or an array's elements one per line. It is for
// tests of this package and for probes, not a client.
func RedisCommand(ctx context.Context, addr string, args ...string) (string, error) {
	conn, err := dial(ctx, addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return "", err
	}
	return readRESP(bufio.NewReader(conn))
}

func readRESP(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("redis: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		var n int
		if _, err := fmt.Sscanf(line[1:], "%d", &n); err != nil {
			return "", fmt.Errorf("redis: bad reply %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		var n int
		if _, err := fmt.Sscanf(line[1:], "%d", &n); err != nil {
			return "", fmt.Errorf("redis: bad reply %q", line)
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			s, err := readRESP(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redis: bad reply %q", line)
}

func probeRedis(ctx context.Context, addr string) error {
	reply, err := RedisCommand(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("redis: PING answered %q", reply)
	}
	return nil
}

// httpClient talks to etcd's HTTP endpoints on loopback: no proxy, no idle
// connections left behind.
var httpClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func probeEtcd(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("etcd: /health answered %s %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// etcdStatus is the part of etcd's maintenance status that names members.
type etcdStatus struct {
	Header struct {
		MemberID string `json:"member_id"`
	} `json:"header"`
	Leader string `json:"leader"`
}

func etcdMemberStatus(ctx context.Context, addr string) (etcdStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v3/maintenance/status", strings.NewReader("{}"))
	if err != nil {
		return etcdStatus{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return etcdStatus{}, err
	}
	defer resp.Body.Close()
	var st etcdStatus
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("etcd: status answered %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("etcd: status: %w", err)
	}
	return st, nil
}

// etcdActivePeers sums the etcd_network_active_peers gauges of the member
// at addr: how many peers it holds a live connection to.
func etcdActivePeers(ctx context.Context, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("etcd: /metrics answered %s", resp.Status)
	}
	n := 0
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "etcd_network_active_peers{") {
			continue
		}
		if f := strings.Fields(line); len(f) == 2 && f[1] != "0" {
			n++
		}
	}
	return n, lines.Err()
}

// ZooKeeperCommand sends a four-letter command ("ruok", "srvr", "mntr") to
// the ZooKeeper server at addr and returns its answer.
func ZooKeeperCommand(ctx context.Context, addr, cmd string) (string, error) {
	conn, err := dial(ctx, addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(conn, 1<<20))
	return string(b), err
}

func probeZooKeeper(ctx context.Context, addr string) error {
	out, err := ZooKeeperCommand(ctx, addr, "srvr")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Mode: ") {
		return fmt.Errorf("zookeeper: srvr answered %q", strings.TrimSpace(out))
	}
	return nil
}

func zooKeeperMode(ctx context.Context, addr string) (string, error) {
	out, err := ZooKeeperCommand(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("zookeeper: not serving: %q", strings.TrimSpace(out))
}

// dial connects to addr with ctx's deadline applied to the connection too.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	_ = conn.SetDeadline(deadline)
	return conn, nil
}
