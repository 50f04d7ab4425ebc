// Command admin is a service's own admin server with the Aegis console
// mounted in it: the program's http.ServeMux serves the program's routes
// (/healthz) and, under /admin/aegis/, the console's handler (package
// console), behind the program's own authentication middleware, on the
// *sql.DB the program already has:
//
//	export AEGIS_POSTGRES_URL=postgres://aegis@127.0.0.1:15432/aegis?sslmode=disable
//	export ADMIN_PASSWORD=$(openssl rand -hex 16)
//	go run ./examples/admin -addr 127.0.0.1:8080 &
//	curl -s 127.0.0.1:8080/healthz                                       # ok: the program's own route
//	curl -s -u admin:"$ADMIN_PASSWORD" 127.0.0.1:8080/admin/aegis/leases  # the console's leases
//
// then open http://127.0.0.1:8080/admin/aegis/ in a browser, as user
// admin with that password. -read-only hides and refuses the console's
// changes (pause, resume or run now a schedule; retry, cancel or discard a
// job).
//
// The middleware here is HTTP basic authentication with the password from
// $ADMIN_PASSWORD (never a flag, which other users of the machine can
// read, and never printed); a service puts its own in its place (single
// sign-on, mTLS, a session). The console is told so
// (console.Config.CallerAuthenticates): it asks for no credentials of its
// own and serves any Host, and still takes a change only from its own form
// (its CSRF field, no cross-site origin).
package main

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/aegislab/aegis/console"
)

// consolePrefix is where the program mounts the console.
const consolePrefix = "/admin/aegis"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "admin:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "`host:port` to serve on")
	user := fs.String("user", "admin", "the basic authentication `user`; the password is $ADMIN_PASSWORD")
	readOnly := fs.Bool("read-only", false, "the console hides and refuses every change")
	if err := fs.Parse(args); err != nil {
		return err
	}
	password := os.Getenv("ADMIN_PASSWORD")
	if password == "" {
		return errors.New("set the admin password in $ADMIN_PASSWORD")
	}
	storeURL := os.Getenv("AEGIS_POSTGRES_URL")
	if storeURL == "" {
		return errors.New("set the store's postgres:// URL in $AEGIS_POSTGRES_URL")
	}

	// The program's own pool, which its own code uses too (/healthz).
	db, err := sql.Open("pgx", storeURL)
	if err != nil {
		return errors.New("the store's URL does not parse") // its error would quote it
	}
	defer db.Close()

	aegisConsole, err := console.New(ctx, &console.Config{
		DB:                  db,
		Prefix:              consolePrefix,
		CallerAuthenticates: true, // basicAuth below
		ReadOnly:            *readOnly,
		Logger:              slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := db.PingContext(r.Context()); err != nil {
			http.Error(w, "the store does not answer", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle(consolePrefix+"/", basicAuth(*user, password, aegisConsole))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "admin: at http://%s/ (the console at %s/, user %s)\n", ln.Addr(), consolePrefix, *user)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

// basicAuth is the program's own authentication: next serves only requests
// that carry user and password (HTTP basic); the others get a 401.
func basicAuth(user, password string, next http.Handler) http.Handler {
	same := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || !same(u, user) || !same(p, password) {
			w.Header().Set("WWW-Authenticate", `Basic realm="admin", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
