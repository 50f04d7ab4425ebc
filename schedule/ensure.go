package schedule

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrExists is returned by Catalog.Ensure for a schedule the catalog has
// with other values than the entry given: Ensure changes nothing then.
var ErrExists = errors.New("schedule: exists with other values")

// errUnchanged rolls back Ensure's transaction when the row is equal.
var errUnchanged = errors.New("schedule: unchanged")

// Ensure creates the schedule e.Name, as Put does, when the namespace does
// not have it, and otherwise leaves the catalog alone: it is how replicas
// seed the catalog at start-up, all at once, without a change of version
// (Put would write a new version each, and every replica's binder would
// rebind the schedule).
//
// When the stored schedule is equal to e (Changes lists nothing: the spec,
// handler, args and policies, the fields Put writes; a pause is not one of
// them), Ensure returns it with a nil error: no new version, no event. When
// it differs, Ensure returns the stored entry and an error wrapping ErrExists
// that names each field that differs, and writes nothing: a replica of an
// older deploy must not undo a newer one's edit at every restart. Change
// a schedule with Put or `aegis schedule apply`. Concurrent Ensures of the
// same entry (replicas starting together) create it once: the check and
// the insert are one transaction that holds the namespace's change
// counter's row (PostgreSQL) or the write lock (SQLite).
//
// An invalid e is refused as Put refuses it: the error names the field and
// wraps aegis.ErrInvalid. A store's error is returned as it is.
func (c *Catalog) Ensure(ctx context.Context, e Entry) (Entry, error) {
	if err := checkEntryName(e.Name); err != nil {
		return Entry{}, fmt.Errorf("schedule: ensure: %w", err)
	}
	v, err := e.validate()
	if err != nil {
		return Entry{}, fmt.Errorf("schedule: ensure %q: %w", e.Name, err)
	}
	var (
		stored  Entry
		changes []string
	)
	err = c.edit(ctx, func(tx execer, gen, now int64) error {
		var cur row
		err := cur.scan(tx.QueryRowContext(ctx, c.q.get, c.ns, e.Name))
		if errors.Is(err, sql.ErrNoRows) {
			return c.write(ctx, tx, v, cur, false, gen, now)
		}
		if err != nil {
			return err
		}
		if stored, err = cur.entry(c.ns); err != nil {
			return err
		}
		changes = changesOf(stored, v)
		return errUnchanged // the version taken is rolled back, and nothing is told
	})
	switch {
	case errors.Is(err, errUnchanged) && len(changes) > 0:
		got, gerr := c.Get(ctx, e.Name)
		if gerr != nil {
			got = stored
		}
		return got, fmt.Errorf("schedule: ensure %q: %w: %s", e.Name, ErrExists, strings.Join(changes, "; "))
	case errors.Is(err, errUnchanged), err == nil:
		return c.Get(ctx, e.Name)
	}
	return Entry{}, fmt.Errorf("schedule: ensure %q: %w", e.Name, err)
}

// Changes lists what Put of want would change of stored, a field a line
// ("Handler: \"a\" → \"b\""), in Entry's order: the spec (Cron, TZ and
// Every, as one "Spec"), Handler, Args (as JSON: insignificant white space
// is not a change), the policies and DisableKeepAlive, with want's
// defaults filled as Put fills them. An empty list means Ensure leaves
// stored as it is. An invalid want is an error naming the field, wrapping
// aegis.ErrInvalid.
func Changes(stored, want Entry) ([]string, error) {
	v, err := want.validate()
	if err != nil {
		return nil, fmt.Errorf("schedule: %q: %w", want.Name, err)
	}
	return changesOf(stored, v), nil
}

// changesOf is Changes of a validated want.
func changesOf(stored, want Entry) []string {
	var out []string
	add := func(field string, old, new any) {
		if old != new {
			out = append(out, fmt.Sprintf("%s: %v → %v", field, old, new))
		}
	}
	quote := func(s string) string { return fmt.Sprintf("%q", s) }
	add("Spec", quote(stored.Spec()), quote(want.Spec()))
	add("Handler", quote(stored.Handler), quote(want.Handler))
	add("Args", compactJSON(stored.Args), compactJSON(want.Args))
	add("Misfire", stored.Misfire, want.Misfire)
	add("CatchUpMax", stored.CatchUpMax, want.CatchUpMax)
	add("Overlap", stored.Overlap, want.Overlap)
	add("StartingDeadline", stored.StartingDeadline, want.StartingDeadline)
	add("MaxAttempts", stored.MaxAttempts, want.MaxAttempts)
	add("LockAtMostFor", stored.LockAtMostFor, want.LockAtMostFor)
	add("LockAtLeastFor", stored.LockAtLeastFor, want.LockAtLeastFor)
	add("DisableKeepAlive", stored.DisableKeepAlive, want.DisableKeepAlive)
	return out
}

// compactJSON is JSON text without insignificant white space, or the text
// as it is when it is not JSON.
func compactJSON(b json.RawMessage) string {
	var buf bytes.Buffer
	if len(b) == 0 {
		return "{}"
	}
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
