package console

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// instant prints a time as the database gave it, in UTC to the
// millisecond; zero prints a dash.
func instant(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

// ago prints how long before now t was: "3.2s ago".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return short(now.Sub(t)) + " ago"
}

// left prints how long until t: "in 12s", or "expired 3s ago".
func left(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if d := t.Sub(now); d >= 0 {
		return "in " + short(d)
	}
	return "expired " + short(now.Sub(t)) + " ago"
}

func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// segment is name (a schedule's, a lease key) as one segment of a URL
// path: escaped, so that a "/" in it is no separator and "zz/../victim"
// resolves to no other name. A browser resolves "." and ".." segments, even
// escaped ("%2e"), so such a name gets a leading "~", and so does a name
// that starts with "~", for the router to take off (unsegment).
func segment(name string) string {
	if name == "." || name == ".." || strings.HasPrefix(name, "~") {
		name = "~" + name
	}
	return url.PathEscape(name)
}

// unsegment is the name a path value (unescaped by the router) names.
func unsegment(v string) string { return strings.TrimPrefix(v, "~") }

// when prints how far t is from now, either way: "12m00s ago", "in 3.5s";
// zero prints a dash.
func when(now, t time.Time) string {
	switch {
	case t.IsZero():
		return "—"
	case t.After(now):
		return "in " + short(t.Sub(now))
	}
	return short(now.Sub(t)) + " ago"
}

// rows is a table's rows, its class and the page's time, for a template
// that prints their ages.
type rows struct {
	Now   time.Time
	Class string
	Rows  any
}
