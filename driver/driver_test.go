package driver_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

func TestCheckKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want string // substring of the error; "" for valid
	}{
		{"invoice/2026-10", ""},
		{strings.Repeat("k", driver.MaxKeyLen), ""},
		{strings.Repeat("é", driver.MaxKeyLen/2), ""},
		{"", "key is empty"},
		{strings.Repeat("k", driver.MaxKeyLen+1), "key is 201 bytes, at most 200"},
		{"a\x00b", "NUL byte at offset 1"},
		{"a\xffb", "not valid UTF-8"},
	}
	for _, tt := range tests {
		err := driver.CheckKey(tt.key)
		if tt.want == "" {
			require.NoError(t, err, "%q", tt.key)
			continue
		}
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, tt.want)
	}
}

func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"", "a", "a\x00", "\xff", strings.Repeat("x", 201), "lock:é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := driver.CheckKey(key)
		valid := key != "" && len(key) <= driver.MaxKeyLen && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
		if valid != (err == nil) {
			t.Fatalf("CheckKey(%q) = %v, valid = %v", key, err, valid)
		}
	})
}

func TestCheckTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ttl, max time.Duration
		want     string
	}{
		{time.Second, 0, ""},
		{driver.MaxTTL, 0, ""},
		{0, 0, "ttl 0s is not positive"},
		{-time.Second, 0, "ttl -1s is not positive"},
		{driver.MaxTTL + 1, 0, "longer than the maximum 24h0m0s"},
		{time.Minute, time.Second, "ttl 1m0s is longer than the maximum 1s"},
		{time.Millisecond, 0, "ttl 1ms is not longer than its clock-drift margin 2.01ms"},
		{2 * time.Millisecond, 0, "not longer than its clock-drift margin"},
		{2020 * time.Microsecond, 0, "not longer than its clock-drift margin"},
		{3 * time.Millisecond, 0, ""},
	}
	for _, tt := range tests {
		err := driver.CheckTTL(tt.ttl, tt.max)
		if tt.want == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, tt.want)
	}
}

func TestLocalDeadline(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := driver.LocalDeadline(start, 10*time.Second)
	require.Equal(t, 10*time.Second-100*time.Millisecond-2*time.Millisecond, d.Sub(start))
	require.True(t, driver.LocalDeadline(start, time.Millisecond).Before(start.Add(time.Millisecond)))
}

// The root's names are the driver's values: an error a backend builds with
// the driver matches aegis.ErrInvalid, and the limits are the same.
func TestRootNames(t *testing.T) {
	require.Same(t, aegis.ErrInvalid, driver.ErrInvalid)
	require.Equal(t, driver.MaxKeyLen, aegis.MaxKeyLen)
	require.Equal(t, driver.MaxTTL, aegis.MaxTTL)
}

// FuzzCheckTTL: a TTL is accepted exactly when it is positive, at most the
// maximum (MaxTTL for none) and longer than its drift margin; then a fresh
// grant's local deadline is ahead of its start and at least the margin
// before the store's expiry. A refusal wraps ErrInvalid and names the TTL.
func FuzzCheckTTL(f *testing.F) {
	for _, tt := range [][2]time.Duration{
		{time.Second, 0}, {driver.MaxTTL, 0}, {driver.MaxTTL + 1, 0}, {0, 0}, {-1, 0},
		{2 * time.Millisecond, 0}, {2021 * time.Microsecond, 0}, {time.Minute, time.Second},
		{48 * time.Hour, 72 * time.Hour}, {-1 << 63, -1 << 63}, {1<<63 - 1, 1<<63 - 1},
	} {
		f.Add(int64(tt[0]), int64(tt[1]))
	}
	f.Fuzz(func(t *testing.T, ttlNS, maxNS int64) {
		ttl, limit := time.Duration(ttlNS), time.Duration(maxNS)
		err := driver.CheckTTL(ttl, limit)
		if limit <= 0 {
			limit = driver.MaxTTL
		}
		drift := driver.Drift(ttl)
		valid := ttl > 0 && ttl <= limit && ttl > drift
		require.Equal(t, valid, err == nil, "CheckTTL(%s, %s) = %v", ttl, time.Duration(maxNS), err)
		if err != nil {
			require.ErrorIs(t, err, aegis.ErrInvalid)
			require.ErrorContains(t, err, "ttl "+ttl.String())
			return
		}
		require.GreaterOrEqual(t, drift, 2*time.Millisecond, "the margin of %s", ttl)
		start := time.Unix(1774746000, 0)
		deadline := driver.LocalDeadline(start, ttl)
		require.True(t, deadline.After(start), "the local deadline of a fresh %s grant is ahead", ttl)
		require.Equal(t, ttl-drift, deadline.Sub(start), "the deadline is the TTL less the margin")
	})
}
