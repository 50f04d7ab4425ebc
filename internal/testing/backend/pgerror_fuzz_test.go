package backend_test

import (
	"errors"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/testing/backend"
)

// fileParam matches the parameters that make pgconn.ParseConfig read a
// file.
var fileParam = regexp.MustCompile(`(?i)ssl|service|passfile`)

// FuzzPostgresServer: the server a PostgreSQL URL names, and the error of
// parsing or connecting to it, never show its password, whatever the URL
// looks like: built properly, in keyword/value form, or pasted together by
// hand (a password with '@', '/', '#' or '?' in it). A URL that parses
// names the host and port pgx would dial.
func FuzzPostgresServer(f *testing.F) {
	for _, s := range [][3]string{{"aegis", "", "127.0.0.1"}, {"u@x", "p@ss/w#rd?", "db.example.com"}, {"", "'\\ ", "::1"}, {"u", ":", "/tmp"}, {"u", "x y", "h1,h2"}} {
		for form := range uint8(3) {
			f.Add(s[0], s[1], s[2], uint16(5432), form)
		}
	}
	const marker = "Pa55-w0rd" // starts every password: no port, no host begins so
	f.Fuzz(func(t *testing.T, user, password, host string, port uint16, form uint8) {
		if strings.Contains(user+host, marker) {
			return
		}
		password = marker + password
		var dsn string
		switch form % 3 {
		case 0:
			dsn = (&url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: net.JoinHostPort(host, strconv.Itoa(int(port))), Path: "/db"}).String()
		case 1:
			quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace
			dsn = "host='" + quote(host) + "' port=" + strconv.Itoa(int(port)) + " user='" + quote(user) + "' password='" + quote(password) + "' dbname=db"
		default:
			dsn = "postgres://" + user + ":" + password + "@" + host + ":" + strconv.Itoa(int(port)) + "/db"
			if fileParam.MatchString(dsn) {
				return // pgx would read the file it names (/dev/zero, say)
			}
		}
		server := backend.PostgresServer(dsn)
		require.NotContains(t, server, marker, "PostgresServer(%q)", dsn)
		cfg, err := pgconn.ParseConfig(dsn)
		if err == nil {
			if form%3 != 2 { // by hand, the user's ':' may move into the password
				require.Equal(t, password, cfg.Password, "%q", dsn)
			}
			if cfg.Host != "" && cfg.Host[0] != '/' {
				require.Equal(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), server)
			}
			err = errors.New("connection refused")
		}
		msg := backend.PostgresError("connect to", dsn, err).Error()
		require.NotContains(t, msg, marker, "PostgresError(%q)", dsn)
	})
}
