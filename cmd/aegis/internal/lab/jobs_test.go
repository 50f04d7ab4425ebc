package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

func TestParseCatalog(t *testing.T) {
	t.Parallel()
	jobs, err := ParseCatalog("invoice-export=1s/300ms, certificates=3s/800ms")
	require.NoError(t, err)
	require.Equal(t, []JobSpec{
		{Name: "invoice-export", Every: time.Second, Work: 300 * time.Millisecond},
		{Name: "certificates", Every: 3 * time.Second, Work: 800 * time.Millisecond},
	}, jobs)
	require.Equal(t, "invoice-export=1s/300ms,certificates=3s/800ms", FormatCatalog(jobs))
	again, err := ParseCatalog(FormatCatalog(jobs))
	require.NoError(t, err)
	require.Equal(t, jobs, again, "FormatCatalog's form parses back")

	for _, tc := range []struct{ spec, want string }{
		{"", "empty"},
		{"  ", "empty"},
		{"invoice-export", `"invoice-export" is not NAME=EVERY/WORK`},
		{"invoice-export=1s", `"invoice-export=1s" is not NAME=EVERY/WORK`},
		{"a=1s/300ms,,b=2s/1s", `"" is not NAME=EVERY/WORK`},
		{"a=soon/300ms", `a: EVERY "soon" is not a duration`},
		{"a=1s/300", `a: WORK "300" is not a duration`},
	} {
		_, err := ParseCatalog(tc.spec)
		require.ErrorIs(t, err, aegis.ErrInvalid, tc.spec)
		require.ErrorContains(t, err, tc.want, tc.spec)
		require.ErrorContains(t, err, "--catalog "+quote(tc.spec), "the error quotes the spec")
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// A catalog is checked against the run's tick by Config.Validate.
func TestCatalogValidate(t *testing.T) {
	t.Parallel()
	cfg := func(spec string) Config {
		c := DefaultConfig()
		c.Strategy = "none"
		jobs, err := ParseCatalog(spec)
		require.NoError(t, err, spec)
		c.Catalog = jobs
		return c
	}
	nine := make([]string, MaxJobs+1)
	for i := range nine {
		nine[i] = string(rune('a'+i)) + "=1s/1ms"
	}
	for _, tc := range []struct{ spec, want string }{
		{"invoice-export=1s/300ms,seat_assignment=2s/1s,c3=3s/2999ms", ""},
		{"a=1s/0s", ""},
		{strings.Join(nine[:MaxJobs], ","), ""},
		{strings.Join(nine, ","), "--catalog: 9 jobs, want at most 8"},
		{"Invoice=1s/300ms", `job name "Invoice"`},
		{"-a=1s/300ms", `job name "-a"`},
		{"=1s/300ms", `job name ""`},
		{"a.b=1s/300ms", `job name "a.b"`},
		{strings.Repeat("x", 41) + "=1s/300ms", "want 1 to 40 of a-z, 0-9"},
		{"a=1s/300ms,a=2s/300ms", `job "a" twice`},
		{"a=1500ms/300ms", "a: EVERY 1.5s is not a whole number of ticks (--tick 1s)"},
		{"a=500ms/300ms", "a: EVERY 500ms is not a whole number of ticks"},
		{"a=0s/0s", "a: EVERY 0s is not a whole number of ticks"},
		{"a=-1s/0s", "a: EVERY -1s is not a whole number of ticks"},
		{"a=1s/-1ms", "a: WORK -1ms is negative"},
		{"a=1s/1s", "a: WORK 1s is not shorter than EVERY 1s"},
		{"a=2s/3s", "a: WORK 3s is not shorter than EVERY 2s"},
	} {
		err := cfg(tc.spec).Validate()
		if tc.want == "" {
			require.NoError(t, err, tc.spec)
			continue
		}
		require.ErrorIs(t, err, aegis.ErrInvalid, tc.spec)
		require.ErrorContains(t, err, tc.want, tc.spec)
	}
}

// The default catalog fits every valid run: its work is capped below each
// cadence, whatever --work says.
func TestDefaultCatalog(t *testing.T) {
	t.Parallel()
	jobs := DefaultCatalog(time.Second, 300*time.Millisecond)
	require.Equal(t, "invoice-export=1s/300ms,seat-assignment=2s/150ms,certificates=3s/450ms", FormatCatalog(jobs))
	for _, work := range []time.Duration{0, time.Second, 10 * time.Second} {
		c := DefaultConfig()
		c.Strategy, c.Work = "none", work
		require.NoError(t, c.Validate(), "--work %s", work)
		for _, j := range c.Jobs() {
			require.Less(t, j.Work, j.Every, "%s with --work %s", j.Name, work)
		}
	}
}

// A job's catalog entry has whole milliseconds, which the catalog stores
// (it refuses the rest): in lease mode, LockAtLeastFor is half an odd
// cadence.
func TestJobEntryMilliseconds(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Strategy, c.Tick, c.Duration = "pg-lease", 15*time.Millisecond, time.Second
	require.NoError(t, c.Validate())
	for _, j := range c.Jobs() {
		e := j.Entry(c)
		require.Equal(t, (j.Every / 2).Truncate(time.Millisecond), e.LockAtLeastFor, j.Name)
		require.Zero(t, e.LockAtLeastFor%time.Millisecond, j.Name)
	}
}

// A job fires at the grid ticks that are multiples of its cadence since
// the epoch (schedule.Interval), so two runs of one catalog fire a job at
// the same phase of the wall clock, whatever tick their run began at.
func TestJobSpecFires(t *testing.T) {
	t.Parallel()
	tick := time.Second
	aligned := time.Unix(6000, 0) // a multiple of 1, 2 and 3 s
	for _, tc := range []struct {
		every time.Duration
		start time.Time
		ticks int
		want  []int
	}{
		{time.Second, aligned, 6, []int{1, 2, 3, 4, 5, 6}},
		{2 * time.Second, aligned, 6, []int{1, 3, 5}},
		{3 * time.Second, aligned, 6, []int{1, 4}},
		{2 * time.Second, aligned.Add(tick), 6, []int{2, 4, 6}},
		{3 * time.Second, aligned.Add(tick), 6, []int{3, 6}},
		{3 * time.Second, aligned.Add(2 * tick), 6, []int{2, 5}},
		{3 * time.Second, aligned.Add(tick), 2, nil},
		{time.Second, aligned, 0, nil},
	} {
		j := JobSpec{Name: "j", Every: tc.every}
		require.Equal(t, tc.want, j.Fires(tc.start, tick, tc.ticks, nil), "every %s from %s, %d ticks", tc.every, tc.start.UTC().Format(time.TimeOnly), tc.ticks)
	}
	// A run's start is a tick of the grid (the lab truncates it to the
	// tick): 400 ms ticks, a job every 1.2 s, fires every third tick.
	start := time.Unix(0, 0).Add(7 * 400 * time.Millisecond)
	j := JobSpec{Name: "j", Every: 1200 * time.Millisecond}
	require.Equal(t, []int{3, 6, 9}, j.Fires(start, 400*time.Millisecond, 9, nil))

	// Edits in the run: from tick 4 on every 400 ms (each tick), paused
	// from tick 7, resumed at tick 9; another job's edit changes nothing.
	at := func(tick int) time.Time { return start.Add(time.Duration(tick-1) * 400 * time.Millisecond) }
	paused, resumed := true, false
	edits := []CatalogEdit{
		{Job: "j", At: at(4), Every: 400 * time.Millisecond},
		{Job: "other", At: at(2), Every: 10 * time.Second},
		{Job: "j", At: at(7), Paused: &paused},
		{Job: "j", At: at(9), Paused: &resumed},
	}
	require.Equal(t, []int{3, 4, 5, 6, 9, 10}, j.Fires(start, 400*time.Millisecond, 10, edits))
}

// FuzzParseCatalog: --catalog is refused with an error that quotes it
// and wraps aegis.ErrInvalid, or it is jobs whose FormatCatalog form
// parses to the same jobs (a campaign's replay line and a report's config
// carry that form); checking them against a tick never panics.
func FuzzParseCatalog(f *testing.F) {
	for _, s := range []string{
		"invoice-export=1s/300ms,certificates=3s/800ms", "a=2s/3s/no-keep-alive", " a = 1s/0s , b=2s/1s", "a=1s", "=/", "a=1s/2s/3s",
		"a/b=1s/2s", "a=-9223372036854775808ns/0s", "a=2562047h47m16.854775807s/1ns", ",", "a=1s/300ms,a=1s/300ms",
	} {
		f.Add(s, int64(time.Second))
	}
	f.Fuzz(func(t *testing.T, spec string, tick int64) {
		jobs, err := ParseCatalog(spec)
		if err != nil {
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, "--catalog")
			return
		}
		require.NotEmpty(t, jobs)
		again, err := ParseCatalog(FormatCatalog(jobs))
		require.NoError(t, err, "%q formatted as %q", spec, FormatCatalog(jobs))
		require.Equal(t, jobs, again, "%q formatted as %q", spec, FormatCatalog(jobs))
		if err := checkJobs(jobs, time.Duration(tick)); err != nil {
			require.ErrorIs(t, err, aegis.ErrInvalid)
		}
	})
}
