package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule computes a job's fire times. Every replica that uses the same
// Schedule computes the same instants, whatever its start time or time zone:
// that is what makes a fire time a usable run key.
type Schedule interface {
	// Next returns the first fire time strictly after t, or the zero time
	// when there is none.
	Next(t time.Time) time.Time
}

// Cron is a parsed cron expression. Create it with [ParseCron].
//
// Fields, separated by spaces (a 5-field spec has no seconds and fires at
// second 0):
//
//	second        0-59
//	minute        0-59
//	hour          0-23
//	day of month  1-31            (? is the same as *)
//	month         1-12 or JAN-DEC
//	day of week   0-7 or SUN-SAT  (0 and 7 are Sunday; ? is the same as *)
//
// Each field is a comma-separated list of *, N, N-M, */S, N/S (N to the
// field's maximum every S) and N-M/S. When both day fields are restricted
// (neither is * or ?), a day matches if either matches, as in Vixie cron;
// otherwise both must. A spec may start with TZ=Zone or CRON_TZ=Zone (an
// IANA name such as Europe/Berlin); the default zone is UTC, never the
// host's, so replicas in different zones agree. The descriptors @yearly
// (@annually), @monthly, @weekly, @daily (@midnight) and @hourly stand for
// their usual specs; "@every D" is [Every] (aligned to the Unix epoch).
//
// Daylight saving time. A cron spec names wall-clock times in its zone, and
// each matching wall-clock time fires exactly once:
//
//   - Spring forward: wall-clock times that do not exist on that day (02:00 to
//     02:59:59 in Europe/Berlin on the last Sunday of March) fire once, at the
//     instant the gap ends (03:00 CEST). A daily 02:30 job runs at 03:00 that
//     day instead of being skipped; several matching times in the gap
//     collapse into that one fire time, which is also the fire time of a
//     03:00 match.
//   - Fall back: wall-clock times that occur twice (02:00 to 02:59:59 in
//     Europe/Berlin on the last Sunday of October) fire at their first
//     occurrence only. A job every 15 minutes therefore pauses for the
//     repeated hour; use [Every], or a spec in UTC, for a job that must fire
//     at a constant rate.
type Cron struct {
	spec                            string
	sec, min, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar                bool   // the field was * or ?
	loc                             *time.Location
}

// Location is the time zone whose wall clock the spec names.
func (c *Cron) Location() *time.Location { return c.loc }

// String returns the spec as it was parsed.
func (c *Cron) String() string { return c.spec }

type field struct {
	name     string
	min, max int
	names    map[string]int
}

var (
	secondField = field{name: "second", min: 0, max: 59}
	minuteField = field{name: "minute", min: 0, max: 59}
	hourField   = field{name: "hour", min: 0, max: 23}
	domField    = field{name: "day of month", min: 1, max: 31}
	monthField  = field{name: "month", min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}}
	dowField = field{name: "day of week", min: 0, max: 7, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}}
)

var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// maxSpecLen bounds a spec: nothing legitimate is longer.
const maxSpecLen = 1024

// ParseCron parses a cron spec (see [Cron]) and returns a Schedule: a *Cron,
// or an [Interval] for "@every D". The error quotes the spec, names the
// field that is wrong and matches aegis.ErrInvalid.
func ParseCron(spec string) (Schedule, error) {
	if len(spec) > maxSpecLen {
		return nil, invalid("cron spec %.40q… is %d bytes, at most %d are allowed", spec, len(spec), maxSpecLen)
	}
	s, err := parseCron(spec)
	if err != nil {
		return nil, invalid("cron spec %q: %w", spec, err)
	}
	return s, nil
}

func parseCron(spec string) (Schedule, error) {
	rest := strings.TrimSpace(spec)
	loc := time.UTC
	if strings.HasPrefix(rest, "TZ=") || strings.HasPrefix(rest, "CRON_TZ=") {
		zone, after, _ := strings.Cut(rest, " ")
		_, name, _ := strings.Cut(zone, "=")
		if name == "" {
			return nil, fmt.Errorf("time zone is empty")
		}
		l, err := time.LoadLocation(name)
		if err != nil || name == "Local" {
			return nil, fmt.Errorf("unknown time zone %q", name)
		}
		loc, rest = l, strings.TrimSpace(after)
	}
	if rest == "" {
		return nil, fmt.Errorf("no fields")
	}
	if strings.HasPrefix(rest, "@every") {
		arg := strings.TrimSpace(strings.TrimPrefix(rest, "@every"))
		d, err := time.ParseDuration(arg)
		if err != nil {
			return nil, fmt.Errorf("@every: %q is not a duration", arg)
		}
		iv := Every(d)
		if err := iv.validate(); err != nil {
			return nil, fmt.Errorf("@every: %w", err)
		}
		return iv, nil
	}
	if strings.HasPrefix(rest, "@") {
		d, ok := descriptors[strings.ToLower(rest)]
		if !ok {
			return nil, fmt.Errorf("unknown descriptor %q", rest)
		}
		rest = d
	}
	fields := strings.Fields(rest)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, fmt.Errorf("want 5 or 6 fields (6 with seconds first), got %d", len(fields))
	}
	c := &Cron{spec: spec, loc: loc}
	var err error
	for _, p := range []struct {
		bits *uint64
		star *bool
		f    field
		s    string
	}{
		{&c.sec, nil, secondField, fields[0]},
		{&c.min, nil, minuteField, fields[1]},
		{&c.hour, nil, hourField, fields[2]},
		{&c.dom, &c.domStar, domField, fields[3]},
		{&c.month, nil, monthField, fields[4]},
		{&c.dow, &c.dowStar, dowField, fields[5]},
	} {
		if *p.bits, err = p.f.parse(p.s); err != nil {
			return nil, err
		}
		if p.star != nil {
			*p.star = p.s == "*" || p.s == "?"
		}
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday
		c.dow = c.dow&^(1<<7) | 1
	}
	if c.dowStar && !c.domStar && !c.daysPossible() {
		return nil, fmt.Errorf("day of month %q never occurs in month %q", fields[3], fields[4])
	}
	return c, nil
}

// daysPossible reports whether some month in the set has some day in the
// day-of-month set (February counts 29 days).
func (c *Cron) daysPossible() bool {
	maxDays := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if c.month&(1<<m) == 0 {
			continue
		}
		for d := 1; d <= maxDays[m]; d++ {
			if c.dom&(1<<d) != 0 {
				return true
			}
		}
	}
	return false
}

func (f field) parse(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("%s field is empty", f.name)
	}
	var bits uint64
	for part := range strings.SplitSeq(s, ",") {
		b, err := f.parsePart(part)
		if err != nil {
			return 0, fmt.Errorf("%s field %q: %w", f.name, s, err)
		}
		bits |= b
	}
	return bits, nil
}

func (f field) parsePart(part string) (uint64, error) {
	if part == "" {
		return 0, fmt.Errorf("empty list element")
	}
	rng, stepText, hasStep := strings.Cut(part, "/")
	lo, hi := f.min, f.max
	if f.max == 7 && !hasStep { // day of week: * means 0-6
		hi = 6
	}
	switch {
	case rng == "*" || rng == "?" && (f.name == domField.name || f.name == dowField.name):
		if f.max == 7 {
			hi = 6
		}
	default:
		a, b, isRange := strings.Cut(rng, "-")
		var err error
		if lo, err = f.value(a); err != nil {
			return 0, err
		}
		switch {
		case isRange:
			if hi, err = f.value(b); err != nil {
				return 0, err
			}
			if lo > hi {
				return 0, fmt.Errorf("range %d-%d is backwards", lo, hi)
			}
		case hasStep:
			hi = f.max
			if f.max == 7 {
				hi = 6
			}
		default:
			hi = lo
		}
	}
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepText)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("step %q is not a positive number", stepText)
		}
		if n > f.max-f.min+1 {
			return 0, fmt.Errorf("step %d is larger than the field's range %d-%d", n, f.min, f.max)
		}
		step = n
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << v
	}
	return bits, nil
}

func (f field) value(s string) (int, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || len(s) > 2 {
		return 0, fmt.Errorf("%q is not a number (or name) of a %s", s, f.name)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%d is out of range %d-%d", v, f.min, f.max)
	}
	return v, nil
}

// searchYears bounds the search for the next match: the rarest spec that
// parses (February 29th) matches at least every 8 years.
const searchYears = 10

// Next returns the first fire time strictly after t (see [Cron] for the
// daylight saving rules), in the spec's zone; the zero time if none within
// ten years, which cannot happen for a spec that parsed.
func (c *Cron) Next(t time.Time) time.Time {
	local := t.In(c.loc)
	w := wallOf(local).Add(time.Second)
	limit := w.Year() + searchYears
	for {
		var ok bool
		if w, ok = c.nextWall(w, limit); !ok {
			return time.Time{}
		}
		if at := resolve(c.loc, w); at.After(t) {
			return at
		}
		// w resolved to an instant not after t: its first occurrence was
		// before t (t is in a repeated hour) or it fell in a gap that ended
		// at or before t.
		w = w.Add(time.Second)
	}
}

// wallOf is t's wall-clock reading, as a UTC time (no zone rules apply to
// it), truncated to the second.
func wallOf(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}

// nextWall returns the first wall-clock time at or after w that matches,
// searching up to the end of year limit.
func (c *Cron) nextWall(w time.Time, limit int) (time.Time, bool) {
	for w.Year() <= limit {
		y, mo, d := w.Date()
		switch {
		case c.month&(1<<uint(mo)) == 0:
			w = time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(w):
			w = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		case c.hour&(1<<uint(w.Hour())) == 0:
			w = w.Truncate(time.Hour).Add(time.Hour)
		case c.min&(1<<uint(w.Minute())) == 0:
			w = w.Truncate(time.Minute).Add(time.Minute)
		case c.sec&(1<<uint(w.Second())) == 0:
			w = w.Add(time.Second)
		default:
			return w, true
		}
	}
	return time.Time{}, false
}

func (c *Cron) dayMatches(w time.Time) bool {
	dom := c.dom&(1<<uint(w.Day())) != 0
	dow := c.dow&(1<<uint(w.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// resolve maps a wall-clock time in loc to an instant: its first occurrence
// when the wall clock shows it twice, the end of the gap when it never
// shows it. It does not rely on time.Date, whose choice in those cases is
// unspecified.
func resolve(loc *time.Location, w time.Time) time.Time {
	naive := w.Unix()
	// Offsets are within ±14h, so the instant lies within naive ± 14h; the
	// offsets in effect 15h either side (and at naive) cover any one
	// transition.
	var best time.Time
	minOff := int64(1 << 62)
	for _, probe := range []int64{naive - 15*3600, naive, naive + 15*3600} {
		_, off := time.Unix(probe, 0).In(loc).Zone()
		minOff = min(minOff, int64(off))
		at := time.Unix(naive-int64(off), 0).In(loc)
		if wallOf(at).Equal(w) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: with the offset before the change (the smaller one) the wall
	// time maps into the zone period that starts at the end of the gap.
	at := time.Unix(naive-minOff, 0).In(loc)
	if start, _ := at.ZoneBounds(); !start.IsZero() {
		return start.In(loc)
	}
	return at
}

// Interval fires every Period, at the instants Offset + k·Period after the
// Unix epoch (k an integer), so every replica computes the same fire times
// whenever it started. Daylight saving time does not affect it. Create it
// with [Every].
type Interval struct {
	// Period is the time between fire times: at least 1ms, a whole number
	// of milliseconds.
	Period time.Duration
	// Offset shifts the fire times: 0 <= Offset < Period, a whole number of
	// milliseconds. Every(time.Hour) with Offset 5m fires at :05 each hour
	// (UTC).
	Offset time.Duration
}

// Every returns an Interval with period d aligned to the Unix epoch.
func Every(d time.Duration) Interval { return Interval{Period: d} }

// Next returns Offset + k·Period, the first such instant after t.
func (i Interval) Next(t time.Time) time.Time {
	if i.Period <= 0 {
		return time.Time{}
	}
	p, off := int64(i.Period), int64(i.Offset)
	n := t.UnixNano() - off
	k := n / p
	if n < 0 && n%p != 0 {
		k-- // floor division
	}
	return time.Unix(0, (k+1)*p+off).UTC()
}

func (i Interval) validate() error {
	switch {
	case i.Period <= 0:
		return fmt.Errorf("period %s is not positive", i.Period)
	case i.Period%time.Millisecond != 0:
		return fmt.Errorf("period %s is not a whole number of milliseconds", i.Period)
	case i.Period > 366*24*time.Hour:
		return fmt.Errorf("period %s is longer than a year", i.Period)
	case i.Offset < 0 || i.Offset >= i.Period:
		return fmt.Errorf("offset %s is not in [0, period %s)", i.Offset, i.Period)
	case i.Offset%time.Millisecond != 0:
		return fmt.Errorf("offset %s is not a whole number of milliseconds", i.Offset)
	}
	return nil
}

// String describes the interval.
func (i Interval) String() string {
	if i.Offset != 0 {
		return fmt.Sprintf("@every %s+%s", i.Period, i.Offset)
	}
	return "@every " + i.Period.String()
}
