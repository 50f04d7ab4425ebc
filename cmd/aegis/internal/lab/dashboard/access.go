package dashboard

import (
	"net/http"
	"strings"

	"github.com/aegislab/aegis/internal/webaccess"
)

// TokenHeader is the request header that carries the token on a mutating
// request.
const TokenHeader = "X-Aegis-Token"

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
		if !webaccess.LoopbackHost(r) {
			return http.StatusForbidden, "this dashboard serves loopback names only (host " + quoteHost(r.Host) + "): to serve other hosts, start it with --addr and a token"
		}
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return 0, ""
	}
	if why := webaccess.CrossOrigin(r); why != "" {
		return http.StatusForbidden, why
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return http.StatusUnsupportedMediaType, "a request body must be JSON (Content-Type: application/json)"
	}
	if s.token != "" {
		got := r.Header.Get(TokenHeader)
		if got == "" {
			return http.StatusUnauthorized, "this dashboard needs its token on every change: send it in the " + TokenHeader + " header (the page takes it from the #token= part of the URL aegis lab printed)"
		}
		if !webaccess.Equal(got, s.token) {
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
