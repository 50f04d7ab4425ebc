package console_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/lease/sqlitelease"
)

// A service mounts the console in its own mux, under a path, behind its
// own authentication, on the *sql.DB it already has (here SQLite; on
// PostgreSQL, pgx's database/sql driver). examples/admin is the whole
// program.
func ExampleServer() {
	dir, err := os.MkdirTemp("", "aegis-console-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitelease.Open(filepath.Join(dir, "aegis.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	const token = "the-service's-own-secret" // from its secret store, in a real service
	srv, err := console.New(context.Background(), &console.Config{
		DB:                  db, // the service's own *sql.DB
		Prefix:              "/admin/aegis",
		CallerAuthenticates: true, // requireToken serves it
		ReadOnly:            true,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/admin/aegis/", requireToken(token, srv))

	// The service serves mux with its own http.Server; here a test server.
	ts := httptest.NewServer(mux)
	defer ts.Close()
	for _, bearer := range []string{"", token} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/admin/aegis/leases", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("with token %t: %s\n", bearer != "", resp.Status)
	}
	// Output:
	// with token false: 401 Unauthorized
	// with token true: 200 OK
}

// requireToken is the service's own authentication: next serves only the
// requests that carry the token as a Bearer header.
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
