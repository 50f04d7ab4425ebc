package redisscript_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/redisscript"
)

func TestCheckPrefix(t *testing.T) {
	t.Parallel()
	for prefix, want := range map[string]string{
		"aegis:":                "",
		"a":                     "",
		strings.Repeat("p", 64): "",
		"":                      "F is empty",
		strings.Repeat("p", 65): "F is 65 bytes, at most 64 are allowed",
		"a{":                    `F "a{" holds '{', '}' or NUL`,
		"}":                     `F "}" holds '{', '}' or NUL`,
		"a\x00":                 `holds '{', '}' or NUL`,
	} {
		err := redisscript.CheckPrefix("F", prefix)
		if want == "" {
			require.NoError(t, err, "%q", prefix)
		} else {
			require.ErrorContains(t, err, want, "%q", prefix)
		}
	}
}

func TestLockFor(t *testing.T) {
	t.Parallel()
	l := redisscript.LockFor("aegis:", "jobs/1")
	require.Equal(t, redisscript.Lock("{aegis:jobs/1}"), l)
	require.Equal(t, "{aegis:jobs/1}:fence", l.Fence())
	require.Equal(t, "{aegis:jobs/1}:released", l.Channel())
	// No key's lock is another key's fence: locks end in '}'.
	require.NotEqual(t, string(redisscript.LockFor("p", "a}:fence")), redisscript.LockFor("p", "a").Fence())
}

func TestMillis(t *testing.T) {
	t.Parallel()
	for ttl, want := range map[time.Duration]int64{
		time.Nanosecond:                    1,
		time.Millisecond:                   1,
		time.Millisecond + time.Nanosecond: 2,
		1500 * time.Microsecond:            2,
		time.Minute:                        60000,
		aegis.MaxTTL:                       86400000,
	} {
		require.Equal(t, want, redisscript.Millis(ttl), "%s", ttl)
	}
}

func TestOwnerValue(t *testing.T) {
	t.Parallel()
	const v = "0123456789abcdef0123456789abcdef"
	l := &aegis.Lease{Key: "k", Token: 42, Owner: redisscript.Owner(v, 42)}
	got, ok := redisscript.Value(l)
	require.True(t, ok)
	require.Equal(t, v, got)
	for name, owner := range map[string]string{
		"other token":  redisscript.Owner(v, 41),
		"no token":     v,
		"empty value":  ":42",
		"empty":        "",
		"signed token": v + ":+42",
		"leading zero": v + ":042",
		"not a number": v + ":4x",
	} {
		_, ok := redisscript.Value(&aegis.Lease{Key: "k", Token: 42, Owner: owner})
		require.False(t, ok, name)
	}
}

func FuzzValue(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef:7", int64(7))
	f.Add(":", int64(0))
	f.Add("a:b:c", int64(1))
	f.Fuzz(func(t *testing.T, owner string, token int64) {
		value, ok := redisscript.Value(&aegis.Lease{Owner: owner, Token: aegis.Token(token)})
		if ok {
			require.NotEmpty(t, value)
			require.Equal(t, owner, redisscript.Owner(value, token), "Value inverts Owner")
		}
	})
}
