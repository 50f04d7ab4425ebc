// Package webaccess holds the access rules the two web servers (the
// lab's dashboard and the operator's console) share: which addresses are
// loopback, the Host check that keeps DNS rebinding out of a loopback
// server, the cross-origin check of a change, and random tokens.
package webaccess

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Loopback reports whether addr (host:port, as --addr takes it) listens on
// the loopback interface only: localhost, 127.0.0.0/8 or ::1. An empty
// host (":7070"), 0.0.0.0, :: and every other name or address are not
// loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return loopbackHost(host)
}

// LoopbackHost reports whether the request's Host names the loopback
// interface. A server on loopback without credentials answers only those:
// a page elsewhere that rebinds its DNS name to 127.0.0.1 sends its own
// name as Host.
func LoopbackHost(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
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

// CrossOrigin returns why a change (a POST) comes from another site, or ""
// when nothing says it does: Sec-Fetch-Site says cross-site or same-site,
// or an Origin header names another host than the request's.
func CrossOrigin(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return "cross-site requests are refused"
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return "requests from another origin are refused"
		}
	}
	return ""
}

// NewToken returns a random token (128 bits, hex).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Equal compares a secret in constant time.
func Equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
