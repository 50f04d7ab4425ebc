package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/runner"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/webaccess"
)

// DefaultLabAddr is where `aegis lab` serves the dashboard.
const DefaultLabAddr = "127.0.0.1:7070"

// shutdownTimeout bounds how long the dashboard's HTTP server waits for
// requests in flight when it stops (the runs and servers stop after).
const shutdownTimeout = 5 * time.Second

// runLabServe is `aegis lab` without an action: the dashboard, until ctx
// ends (Ctrl-C).
func runLabServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab", stderr, labUsage)
	addr := fs.String("addr", DefaultLabAddr, "`host:port` to serve the dashboard on; an address other than loopback needs a token")
	token := fs.String("token", "", "the `token` every change must carry (default: none on loopback, else a generated one, printed)")
	dir := fs.String("dir", "", "scratch `directory` for the servers the lab starts (default: a temporary one, removed on exit)")
	out := fs.String("out", "", "`directory` for the checker's visualisations of violations (default: in the scratch directory)")
	given := labServerFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (the dashboard takes flags only; did you mean `aegis lab run`?)", fs.Arg(0))
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return usagef("--addr %q: want host:port, such as %s", *addr, DefaultLabAddr)
	}
	generated := false
	if *token == "" && !webaccess.Loopback(*addr) {
		*token, generated = webaccess.NewToken(), true
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve the dashboard: %w", err)
	}
	defer ln.Close()
	s, err := runner.NewSession(runner.Options{Dir: *dir, Servers: given(), Log: stderr})
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(stderr, "aegis lab: stop the servers: %v\n", err)
		}
	}()
	dash, err := dashboard.New(s, &dashboard.Config{Token: *token, OutDir: *out, Log: stderr})
	if err != nil {
		return err
	}
	defer dash.Close()
	srv := &http.Server{Handler: dash, ReadHeaderTimeout: 10 * time.Second}

	url := dashboardURL(ln.Addr().(*net.TCPAddr), *addr)
	switch {
	case generated:
		fmt.Fprintf(stdout, "aegis lab: the dashboard is at %s#token=%s\n", url, *token)
		fmt.Fprintf(stdout, "aegis lab: %s is not loopback: every change needs the token %s (the URL above carries it)\n", *addr, *token)
	case *token != "":
		fmt.Fprintf(stdout, "aegis lab: the dashboard is at %s (add #token=YOUR-TOKEN to the URL: every change needs it)\n", url)
	default:
		fmt.Fprintf(stdout, "aegis lab: the dashboard is at %s\n", url)
	}
	fmt.Fprintln(stdout, "aegis lab: Ctrl-C stops it, its runs and the servers it started")

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve the dashboard: %w", err)
	}
	fmt.Fprintln(stderr, "aegis lab: stopping the runs and the servers…")
	_ = dash.Close() // ends the runs and the event streams, so Shutdown does not wait on them
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the dashboard: %w", err)
	}
	return nil
}

// dashboardURL is the URL to print for a listener on addr (as given):
// an unspecified host (":7070", "0.0.0.0") is named by the machine's
// host name.
func dashboardURL(tcp *net.TCPAddr, given string) string {
	host, _, _ := net.SplitHostPort(given)
	if host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		} else {
			host = "localhost"
		}
	}
	return fmt.Sprintf("http://%s/", net.JoinHostPort(host, fmt.Sprint(tcp.Port)))
}
