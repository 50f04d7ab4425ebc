package console

import (
	"net/http"
	"strings"

	"github.com/aegislab/aegis/internal/webaccess"
)

// cookieName carries the token after a first visit with ?token=, so that
// the token leaves the address bar (and the history) at once.
const cookieName = "aegis_console"

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
	if s.cfg.CallerAuthenticates {
		return nil // the program's middleware let the request through
	}
	if s.cfg.Token == "" && s.cfg.User == "" {
		if !webaccess.LoopbackHost(r) {
			return &refusal{http.StatusForbidden, "this console serves loopback names only: to serve other hosts, start it with a token or a user"}
		}
		return nil
	}
	if s.cfg.Token != "" {
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && webaccess.Equal(bearer, s.cfg.Token) {
			return nil
		}
		if c, err := r.Cookie(cookieName); err == nil && webaccess.Equal(c.Value, s.cfg.Token) {
			return nil
		}
	}
	if s.cfg.User != "" {
		if u, p, ok := r.BasicAuth(); ok && webaccess.Equal(u, s.cfg.User) && webaccess.Equal(p, s.cfg.Password) {
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
	if why := webaccess.CrossOrigin(r); why != "" {
		return &refusal{http.StatusForbidden, why}
	}
	if !webaccess.Equal(r.PostFormValue("csrf"), s.csrf) {
		return &refusal{http.StatusForbidden, "the form is not from this console (its CSRF field is missing or stale): reload the page"}
	}
	return nil
}
