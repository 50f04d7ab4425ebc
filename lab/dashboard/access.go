package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// TokenHeader is the request header that carries the token on a mutating
// request.
const TokenHeader = "X-Aegis-Token"

// Loopback reports whether addr (host:port, as `aegis lab --addr` takes
// it) listens on the loopback interface only: localhost, 127.0.0.0/8 or
// ::1. An empty host (":7070"), 0.0.0.0, :: and every other name or
// address are not loopback, and need a token.
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

// check applies the access rules to a request and returns the status and
// message of a refusal, or 0.
//
//   - Without a token (a loopback dashboard) the request's Host must be a
//     loopback name or address, so that a page on another site cannot
//     reach the dashboard by rebinding its DNS name to 127.0.0.1.
//   - A mutating request (POST) must be JSON, which a cross-site form
//     cannot send without a CORS preflight (that the dashboard never
//     answers), must not come from another origin, and, with a token,
//     must carry it in the X-Aegis-Token header.
func (s *Server) check(r *http.Request) (int, string) {
	if s.token == "" {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !loopbackHost(host) {
			return http.StatusForbidden, "this dashboard serves loopback names only (host " + quoteHost(r.Host) + "): to serve other hosts, start it with --addr and a token"
		}
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return 0, ""
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return http.StatusForbidden, "cross-site requests are refused"
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return http.StatusForbidden, "requests from another origin are refused"
		}
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return http.StatusUnsupportedMediaType, "a request body must be JSON (Content-Type: application/json)"
	}
	if s.token != "" {
		got := r.Header.Get(TokenHeader)
		if got == "" {
			return http.StatusUnauthorized, "this dashboard needs its token on every change: send it in the " + TokenHeader + " header (the page takes it from the #token= part of the URL aegis lab printed)"
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
			return http.StatusForbidden, "wrong token"
		}
	}
	return 0, ""
}

// quoteHost quotes a Host header for an error message, cut short.
func quoteHost(h string) string {
	if len(h) > 64 {
		h = h[:64] + "…"
	}
	return `"` + strings.ToValidUTF8(h, "?") + `"`
}
