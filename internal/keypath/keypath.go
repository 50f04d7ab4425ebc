// Package keypath turns a lease key into one segment of a hierarchical
// store's path: an etcd key prefix or a ZooKeeper znode name.
//
// Keys may hold any UTF-8 but NUL, including '/', so they cannot be used as
// path segments as they are: "a" and "a/b" would be a lock and a lock
// nested in it, and ZooKeeper refuses control characters, some Unicode
// ranges and the names "." and "..". A segment keeps ASCII letters, digits,
// '-', '_' and '.' (except a leading '.') and writes every other byte as
// %XX, so it is readable for the usual keys ("invoice-export%2F2026-10"),
// never contains '/', and maps back to exactly one key.
package keypath

import (
	"fmt"
	"strings"
)

// Segment returns key as a path segment: no '/', no byte outside
// [A-Za-z0-9._%-], never "." or "..", at most three times as long as key.
// Different keys give different segments.
func Segment(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keep(c) && (c != '.' || i > 0) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Key is the inverse of Segment. It fails on a segment Segment cannot
// return.
func Key(segment string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(segment); i++ {
		c := segment[i]
		switch {
		case c == '%':
			if i+2 >= len(segment) {
				return "", fmt.Errorf("keypath: segment %q: truncated escape at offset %d", segment, i)
			}
			hi, ok1 := unhex(segment[i+1])
			lo, ok2 := unhex(segment[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("keypath: segment %q: bad escape at offset %d", segment, i)
			}
			v := hi<<4 | lo
			if keep(v) && (v != '.' || b.Len() > 0) {
				return "", fmt.Errorf("keypath: segment %q: byte %q is escaped but need not be", segment, v)
			}
			b.WriteByte(v)
			i += 2
		case keep(c) && (c != '.' || i > 0):
			b.WriteByte(c)
		default:
			return "", fmt.Errorf("keypath: segment %q: byte %q at offset %d must be escaped", segment, c, i)
		}
	}
	return b.String(), nil
}

func keep(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
