// Package errtext makes the text of an error storable: what the queue, the
// scheduler, elect and the lab write into a text column as an outcome.
// PostgreSQL refuses a NUL (SQLSTATE 22021) and invalid UTF-8 (22021,
// 22P05 in jsonb), and a handler's error may be megabytes long; an outcome
// whose text cannot be written is not recorded at all, and a job or a tick
// whose outcome is not recorded runs again. So every such text passes
// through Clean before it is written, and ASCII is the fallback when the
// store still refuses it.
package errtext

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxLen is the most bytes a storable text has.
const MaxLen = 4096

// tail is how many bytes of a cut text's end are kept: an error's cause
// is often last ("…: connection refused").
const tail = 1024

// Of is Clean(err.Error()), or "" for a nil err.
func Of(err error) string {
	if err == nil {
		return ""
	}
	return Clean(err.Error())
}

// Clean returns s made storable in any text column: valid UTF-8 (each run
// of invalid bytes becomes U+FFFD), no NUL (each becomes the four
// characters \x00), at most MaxLen bytes. A longer text keeps its head and
// its last kilobyte around a marker that says how many bytes were cut. A
// text that is already storable is returned unchanged, so Clean is
// idempotent.
func Clean(s string) string {
	if len(s) <= MaxLen && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", `\x00`)
	if len(s) <= MaxLen {
		return s
	}
	// The marker's length depends on the count it prints; the count
	// depends on the head's length: the head is sized for the longest
	// marker an int can print, then cut back to a rune boundary.
	longest := len(marker(len(s)))
	head := runeStart(s, MaxLen-tail-longest)
	end := runeEnd(s, len(s)-tail)
	return s[:head] + marker(end-head) + s[end:]
}

func marker(cut int) string { return fmt.Sprintf("\n… [%d bytes cut] …\n", cut) }

// runeStart is the largest i <= n at which a rune of s starts.
func runeStart(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// runeEnd is the smallest i >= n at which a rune of s starts (or len(s)).
func runeEnd(s string, n int) int {
	for n < len(s) && !utf8.RuneStart(s[n]) {
		n++
	}
	return n
}

// ASCII is the fallback text of an outcome whose Clean text the store
// still refused (why: the store's error): the refusal, then s quoted as
// ASCII (strconv.QuoteToASCII), cut to MaxLen. Every store takes ASCII.
func ASCII(s string, why error) string {
	q := strconv.QuoteToASCII(s)
	head := fmt.Sprintf("the error text was refused by the store (%v); as ASCII: ", why)
	head = strconv.QuoteToASCII(head)
	head = head[1 : len(head)-1] // unquoted, but ASCII: the store's error may hold anything
	if len(head) > MaxLen/2 {
		head = head[:MaxLen/2]
	}
	if room := MaxLen - len(head); len(q) > room {
		q = q[:room-len(" ...")] + " ..."
	}
	return head + q
}

// Panic is the storable text of a recovered panic: its value and the
// first frames of the panicking goroutine's stack (debug.Stack() taken in
// the deferred recover), from the frame that panicked on. The whole stack
// belongs in the log, not in the stored outcome.
func Panic(v any, stack []byte) string {
	return Clean(fmt.Sprintf("panicked: %v\n%s", v, frames(stack, 5)))
}

// frames returns the first n frames of stack after the runtime's panic
// frame (each frame is a function line and a file line), or its first n
// frames when it has none.
func frames(stack []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimSpace(stack), []byte("\n"))
	if len(lines) > 0 && bytes.HasPrefix(lines[0], []byte("goroutine ")) {
		lines = lines[1:]
	}
	for i := 0; i+1 < len(lines); i += 2 {
		if bytes.HasPrefix(lines[i], []byte("panic(")) {
			lines = lines[i+2:]
			break
		}
	}
	if len(lines) > 2*n {
		lines = lines[:2*n]
	}
	return bytes.Join(lines, []byte("\n"))
}

// Refused reports an error of a store that refused a write for its data:
// PostgreSQL's SQLSTATE class 22 (data exception: a NUL or invalid UTF-8
// in a text, a value out of range), SQLite's SQLITE_TOOBIG (a text or blob
// over its length limit). The errors are read through the interfaces of
// pgconn.PgError (SQLState) and modernc.org/sqlite's Error (Code).
func Refused(err error) bool {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.SQLState(), "22")
	}
	var se interface{ Code() int }
	return errors.As(err, &se) && se.Code()&0xff == sqliteTooBig
}

// sqliteTooBig is SQLITE_TOOBIG, the primary result code (extended codes
// keep it in their low byte).
const sqliteTooBig = 18
