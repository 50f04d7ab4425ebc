package console

import (
	"fmt"
	"net/url"
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

func pathEscape(s string) string { return url.PathEscape(s) }
