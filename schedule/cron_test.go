package schedule

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

func mustParse(t testing.TB, spec string) Schedule {
	t.Helper()
	s, err := ParseCron(spec)
	require.NoError(t, err, spec)
	return s
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// fires returns the first n fire times after from.
func fires(s Schedule, from time.Time, n int) []string {
	var out []string
	for range n {
		from = s.Next(from)
		out = append(out, from.UTC().Format(time.RFC3339))
	}
	return out
}

func TestParseCronErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ spec, want string }{
		{"", "no fields"},
		{"   ", "no fields"},
		{"* * *", "want 5 or 6 fields"},
		{"* * * * * * *", "want 5 or 6 fields"},
		{"60 * * * * *", "second field \"60\": 60 is out of range 0-59"},
		{"* 60 * * * *", "minute field"},
		{"* * 24 * * *", "hour field \"24\": 24 is out of range 0-23"},
		{"* * * 0 * *", "day of month field \"0\": 0 is out of range 1-31"},
		{"* * * * 13 *", "month field"},
		{"* * * * * 8", "day of week field"},
		{"* * * * FOO *", "\"FOO\" is not a number (or name) of a month"},
		{"* * 5-2 * * *", "range 5-2 is backwards"},
		{"*/0 * * * * *", "step \"0\" is not a positive number"},
		{"*/-1 * * * * *", "not a positive number"},
		{"*/61 * * * * *", "step 61 is larger than the field's range"},
		{"1,,2 * * * * *", "empty list element"},
		{"? * * * * *", "\"?\" is not a number"},
		{"0 0 0 30 2 *", "day of month \"30\" never occurs in month \"2\""},
		{"0 0 0 31 4,6,9,11 *", "never occurs"},
		{"TZ=Mars/Olympus * * * * *", "unknown time zone \"Mars/Olympus\""},
		{"TZ=Local * * * * *", "unknown time zone"},
		{"TZ= * * * * *", "time zone is empty"},
		{"TZ=UTC", "no fields"},
		{"@fortnightly", "unknown descriptor"},
		{"@every", "@every: \"\" is not a duration"},
		{"@every -1s", "period -1s is not positive"},
		{"@every 1500us", "not a whole number of milliseconds"},
		{"@every 9000h", "longer than a year"},
		{"1 2 3 4 5 6" + strings.Repeat(" ", 2000), "at most 1024"},
	}
	for _, tt := range tests {
		_, err := ParseCron(tt.spec)
		require.ErrorIs(t, err, aegis.ErrInvalid, tt.spec)
		require.Contains(t, err.Error(), tt.want, tt.spec)
		quoted := fmt.Sprintf("cron spec %q", tt.spec)
		if len(tt.spec) > maxSpecLen {
			quoted = fmt.Sprintf("cron spec %.40q", tt.spec)
		}
		require.Contains(t, err.Error(), quoted, "the error quotes the spec")
	}
}

func TestCronNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		from string
		want []string
	}{
		{"* * * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"}},
		{"*/15 * * * * *", "2026-01-01T00:00:07Z", []string{"2026-01-01T00:00:15Z", "2026-01-01T00:00:30Z", "2026-01-01T00:00:45Z", "2026-01-01T00:01:00Z"}},
		{"0 * * * *", "2026-01-01T10:17:00Z", []string{"2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"}},
		{"30 5 * * * *", "2026-01-01T10:05:30Z", []string{"2026-01-01T11:05:30Z"}},
		{"0 0 2 * * *", "2026-01-01T02:00:00Z", []string{"2026-01-02T02:00:00Z", "2026-01-03T02:00:00Z"}},
		{"0 0 0 * * MON-FRI", "2026-01-02T12:00:00Z", []string{"2026-01-05T00:00:00Z", "2026-01-06T00:00:00Z"}}, // Fri → Mon
		{"0 0 0 * * 7", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},       // Sunday as 7
		{"0 0 0 1 * 1", "2026-01-01T00:00:00Z", []string{"2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"}},       // 1st OR Monday
		{"0 0 0 ? * 1", "2026-01-01T00:00:00Z", []string{"2026-01-05T00:00:00Z"}},
		{"0 0 0 29 feb *", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"0 0 0 29 2 *", "2096-03-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}}, // 2100 is not a leap year
		{"0 0 0 31 * *", "2026-04-01T00:00:00Z", []string{"2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z"}},
		{"0 10-20/5 * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:10:00Z", "2026-01-01T00:15:00Z", "2026-01-01T00:20:00Z", "2026-01-01T01:10:00Z"}},
		{"0 50/5 * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:50:00Z", "2026-01-01T00:55:00Z", "2026-01-01T01:50:00Z"}},
		{"@hourly", "2026-01-01T00:30:00Z", []string{"2026-01-01T01:00:00Z"}},
		{"@daily", "2026-01-01T00:30:00Z", []string{"2026-01-02T00:00:00Z"}},
		{"@weekly", "2026-01-01T00:30:00Z", []string{"2026-01-04T00:00:00Z"}},
		{"@monthly", "2026-01-15T00:00:00Z", []string{"2026-02-01T00:00:00Z"}},
		{"@yearly", "2026-01-15T00:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"TZ=Asia/Tokyo 0 0 9 * * *", "2026-01-01T00:00:00Z", []string{"2026-01-02T00:00:00Z"}}, // 09:00 JST
		{"CRON_TZ=America/New_York 0 0 9 * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T14:00:00Z"}},
		{"@every 90s", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z"}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, fires(mustParse(t, tt.spec), at(tt.from), len(tt.want)), tt.spec)
	}
}

// The DST rules of Cron's doc comment, in Europe/Berlin (2026: spring
// forward on March 29 at 02:00 CET, fall back on October 25 at 03:00 CEST)
// and America/New_York.
func TestCronDST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec string
		from string
		want []string
	}{
		{
			"spring: a daily 02:30 fires at 03:00 CEST on the day that has no 02:30",
			"TZ=Europe/Berlin 0 30 2 * * *", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			"spring: every 15 minutes, the whole gap collapses into 03:00 CEST",
			"TZ=Europe/Berlin 0 */15 * * * *", "2026-03-29T00:40:00Z",
			[]string{"2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"},
		},
		{
			"spring: a 03:00 job is unaffected",
			"TZ=Europe/Berlin 0 0 3 * * *", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z"},
		},
		{
			"autumn: a daily 02:30 fires once, at the first (CEST) occurrence",
			"TZ=Europe/Berlin 0 30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		},
		{
			"autumn: every 15 minutes pauses for the repeated hour",
			"TZ=Europe/Berlin 0 */15 * * * *", "2026-10-25T00:40:00Z",
			[]string{"2026-10-25T00:45:00Z", "2026-10-25T02:00:00Z", "2026-10-25T02:15:00Z"},
		},
		{
			"autumn: from inside the second occurrence, 02:30 is not fired again",
			"TZ=Europe/Berlin 0 30 2 * * *", "2026-10-25T01:10:00Z",
			[]string{"2026-10-26T01:30:00Z"},
		},
		{
			"New York spring: 02:30 runs at 03:00 EDT",
			"TZ=America/New_York 0 30 2 * * *", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"},
		},
		{
			"New York autumn: 01:30 fires at its EDT occurrence only",
			"TZ=America/New_York 0 30 1 * * *", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		},
		{
			"Samoa skipped December 30, 2011: its noon fires when the gap ends",
			"TZ=Pacific/Apia 0 0 12 * * *", "2011-12-29T23:00:00Z",
			[]string{"2011-12-30T10:00:00Z", "2011-12-30T22:00:00Z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, fires(mustParse(t, tt.spec), at(tt.from), len(tt.want)))
		})
	}
}

func TestEvery(t *testing.T) {
	t.Parallel()
	s := Every(time.Second)
	require.Equal(t, at("2026-01-01T00:00:01Z"), s.Next(at("2026-01-01T00:00:00Z")))
	require.Equal(t, at("2026-01-01T00:00:01Z"), s.Next(at("2026-01-01T00:00:00.999Z")))
	off := Interval{Period: time.Hour, Offset: 5 * time.Minute}
	require.Equal(t, at("2026-01-01T10:05:00Z"), off.Next(at("2026-01-01T09:05:00Z")))
	require.Equal(t, at("2026-01-01T09:05:00Z"), off.Next(at("2026-01-01T09:04:59Z")))
	// Before the epoch too: floor division.
	require.Equal(t, time.Unix(-2, 0).UTC(), Every(2*time.Second).Next(time.Unix(-3, 0)))
	// Every replica, whatever its zone or start, computes the same instants.
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	require.True(t, s.Next(at("2026-03-29T01:00:00.5Z").In(berlin)).Equal(at("2026-03-29T01:00:01Z")))
	require.Equal(t, "@every 1h0m0s+5m0s", off.String())
}

// FuzzParseCron: no spec panics; every accepted spec yields fire times that
// increase, and each one is a wall-clock time the spec matches, or the end
// of a daylight-saving gap.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{
		"* * * * * *", "0 30 2 * * *", "TZ=Europe/Berlin 0 */15 * * * *", "0 0 0 29 2 *",
		"0 0 0 1 * 1", "@every 1m", "@daily", "1-5/2,7 * * ? jan-mar sun-sat", "*/7 */7 */5 */3 */2 */2",
		"CRON_TZ=America/New_York 0 30 1 * * *", "TZ=Pacific/Apia 0 0 12 * * *",
	} {
		f.Add(s, int64(1774746000)) // 2026-03-29T01:00:00Z, the Berlin spring change
	}
	f.Fuzz(func(t *testing.T, spec string, unix int64) {
		s, err := ParseCron(spec)
		if err != nil {
			if !errors.Is(err, aegis.ErrInvalid) {
				t.Fatalf("%q: the error does not match aegis.ErrInvalid: %v", spec, err)
			}
			return
		}
		from := time.Unix(unix%(1<<34), 0) // within ±544 years of the epoch
		for range 5 {
			next := s.Next(from)
			if next.IsZero() {
				return
			}
			if !next.After(from) {
				t.Fatalf("%q: Next(%s) = %s, not after", spec, from, next)
			}
			if c, ok := s.(*Cron); ok {
				w := wallOf(next.In(c.loc))
				matches := c.month&(1<<uint(w.Month())) != 0 && c.dayMatches(w) &&
					c.hour&(1<<uint(w.Hour())) != 0 && c.min&(1<<uint(w.Minute())) != 0 && c.sec&(1<<uint(w.Second())) != 0
				if start, _ := next.ZoneBounds(); !matches && !next.Equal(start) {
					t.Fatalf("%q: Next(%s) = %s, which the spec does not match", spec, from, next)
				}
			}
			from = next
		}
	})
}

// FuzzInterval: an interval spec ("@every D", the catalog's --every D) is
// accepted exactly when D is a Go duration of whole milliseconds, positive
// and at most a year; an accepted one prints as a spec that parses to the
// same Interval, which is what the catalog stores and reads back. An
// interval (with any valid offset) fires after every instant, at most a
// period later, on the epoch-aligned grid, one period apart.
func FuzzInterval(f *testing.F) {
	for _, d := range []string{"1s", "1ms", "500us", "0s", "-1s", "1h30m", "8784h", "8784h1ms", "1.5ms", " 2m ", "1e3s", "", "1", ".5s", "9223372036854775807ns"} {
		f.Add(d, int64(0), int64(1774746000)*1e9)
	}
	f.Add("1h", int64(5*time.Minute), int64(-3e9))
	f.Add("2s", int64(time.Second), int64(-1))
	f.Fuzz(func(t *testing.T, d string, offset, at int64) {
		spec := "@every " + d
		s, err := ParseCron(spec)
		dur, perr := time.ParseDuration(strings.TrimSpace(d))
		valid := len(spec) <= maxSpecLen && perr == nil && dur > 0 && dur%time.Millisecond == 0 && dur <= 366*24*time.Hour
		require.Equal(t, valid, err == nil, "ParseCron(%q) = %v", spec, err)
		if err != nil {
			require.ErrorIs(t, err, aegis.ErrInvalid)
			return
		}
		require.Equal(t, Every(dur), s)
		again, err := ParseCron(s.(Interval).String())
		require.NoError(t, err, "%q printed as %q", spec, s.(Interval).String())
		require.Equal(t, s, again)
		e, err := Entry{Name: "n", Handler: "h", Every: dur}.validate()
		require.NoError(t, err, "the catalog takes what ParseCron takes")
		stored, tz := e.storedSpec()
		require.Equal(t, s.(Interval).String(), stored)
		read, err := parseStored(stored, tz)
		require.NoError(t, err)
		require.Equal(t, s, read, "the stored spec reads back")

		iv := Interval{Period: dur, Offset: time.Duration(offset)}
		if iv.validate() != nil {
			require.False(t, offset >= 0 && offset < int64(dur) && offset%int64(time.Millisecond) == 0, "offset %s of %s refused", iv.Offset, dur)
			iv.Offset = 0
		}
		from := time.Unix(0, at%(1<<62)) // leaves room for a period either side
		next := iv.Next(from)
		require.True(t, next.After(from), "%v: Next(%s) = %s", iv, from, next)
		require.LessOrEqual(t, next.Sub(from), iv.Period, "%v: Next(%s) = %s", iv, from, next)
		require.Zero(t, (next.UnixNano()-int64(iv.Offset))%int64(iv.Period), "%v: Next(%s) = %s is off the grid", iv, from, next)
		require.Equal(t, next.Add(iv.Period), iv.Next(next), "%v: the tick after %s", iv, next)
	})
}
