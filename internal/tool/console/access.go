package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// cookieName carries the token after a first visit with ?token=, so that
// the token leaves the address bar (and the history) at once.
const cookieName = "aegis_console"

// Loopback reports whether addr (host:port) listens on the loopback
// interface only: localhost, 127.0.0.0/8 or ::1. An empty host, 0.0.0.0,
// :: and every other name are not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return loopbackHost(host)
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// NewToken returns a random token (128 bits, hex).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// refusal is why a request is refused: its status and message.
type refusal struct {
	status int
	msg    string
}

// authenticate applies the access rules to every request:
//
//   - With neither a token nor a user (a loopback console), the Host must
//     be a loopback name or address, so that a page elsewhere cannot reach
//     the console by rebinding its DNS name to 127.0.0.1.
//   - With a token, the request carries it (Authorization: Bearer, or the
//     cookie a first visit with ?token= set); with a user, HTTP basic
//     authentication. Either is enough when both are set.
func (s *Server) authenticate(r *http.Request) *refusal {
	if s.cfg.Token == "" && s.cfg.User == "" {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !loopbackHost(host) {
			return &refusal{http.StatusForbidden, "this console serves loopback names only: to serve other hosts, start it with a token or a user"}
		}
		return nil
	}
	if s.cfg.Token != "" {
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(bearer, s.cfg.Token) {
			return nil
		}
		if c, err := r.Cookie(cookieName); err == nil && equal(c.Value, s.cfg.Token) {
			return nil
		}
	}
	if s.cfg.User != "" {
		if u, p, ok := r.BasicAuth(); ok && equal(u, s.cfg.User) && equal(p, s.cfg.Password) {
			return nil
		}
	}
	return &refusal{http.StatusUnauthorized, "this console needs its token (open the address it printed, with ?token=) or its user and password"}
}

// checkMutation applies the rules of a change (a POST): not in read-only
// mode; from this console's own pages (the form's CSRF field, which a page
// on another site cannot read, and no cross-site origin).
func (s *Server) checkMutation(r *http.Request) *refusal {
	if s.cfg.ReadOnly {
		return &refusal{http.StatusForbidden, "this console is read-only"}
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return &refusal{http.StatusForbidden, "cross-site requests are refused"}
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return &refusal{http.StatusForbidden, "requests from another origin are refused"}
		}
	}
	if !equal(r.PostFormValue("csrf"), s.csrf) {
		return &refusal{http.StatusForbidden, "the form is not from this console (its CSRF field is missing or stale): reload the page"}
	}
	return nil
}
