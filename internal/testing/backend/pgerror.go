package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresServer names the server a PostgreSQL URL points at, as
// host:port, and nothing else of the URL: a URL may carry a password, and
// these names go into errors that are printed and pasted into issues. It
// is "" for a URL that does not parse.
func PostgresServer(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil || cfg.Host == "" {
		return ""
	}
	if cfg.Host[0] == '/' { // a Unix socket directory
		return fmt.Sprintf("%s (port %d)", cfg.Host, cfg.Port)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// PostgresError is an error from parsing url or connecting to its server,
// said as which server (host:port) and why (connection refused, the
// authentication the server refused, ...), never with the URL. It wraps
// err, for errors.Is and errors.As; its message is its own, because pgx's
// are multi-line and show the URL of a string it could not parse with its
// password redacted only on a best-effort basis.
func PostgresError(what, url string, err error) error {
	return &pgError{what: what, server: PostgresServer(url), cause: pgCause(err), err: err}
}

type pgError struct {
	what, server, cause string
	err                 error
}

func (e *pgError) Error() string {
	if e.server == "" {
		return fmt.Sprintf("%s PostgreSQL: %s", e.what, e.cause)
	}
	return fmt.Sprintf("%s PostgreSQL at %s: %s", e.what, e.server, e.cause)
}

func (e *pgError) Unwrap() error { return e.err }

// pgCause says in a few words why a connection failed.
func pgCause(err error) string {
	var pg *pgconn.PgError
	var parse *pgconn.ParseConfigError
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &parse):
		return "the URL does not parse (not shown: it may carry a password)"
	case errors.As(err, &pg):
		switch pg.Code {
		case "28P01", "28000":
			return fmt.Sprintf("authentication failed: %s (SQLSTATE %s)", pg.Message, pg.Code)
		}
		return fmt.Sprintf("%s (SQLSTATE %s)", pg.Message, pg.Code)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (is the server running, on that port?)"
	case errors.As(err, &dns):
		return "unknown host: " + dns.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer before the deadline"
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.As(err, &op):
		return op.Err.Error()
	}
	// pgconn's ConnectError names the user and database, then the cause.
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && errors.Unwrap(ce) != nil {
		return errors.Unwrap(ce).Error()
	}
	return err.Error()
}
