package redisscript_test

import (
	"errors"
	"fmt"
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

// redisError is an error reply as go-redis returns it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestTranslatePermissions: Redis words a refusal differently by version
// and by where it happens (a command sent, a command inside a script); the
// error says which command, key or channel the call needed in each case.
func TestTranslatePermissions(t *testing.T) {
	t.Parallel()
	lock := redisscript.LockFor("p:", "k")
	for _, tt := range []struct {
		op, reply, want string
	}{
		{"acquire", "NOPERM this user has no permissions to run the 'evalsha' command", `acquire "k": the Redis user lacks a permission: the user may not run EVALSHA; a grant runs EVALSHA or EVAL of a script calling SET, GET, INCR and PTTL on keys "{p:k}" and "{p:k}:fence" (see ACLRules): wrapped: NOPERM`},
		{"acquire", "NOPERM User app has no permissions to run the 'evalsha' command", "the user may not run EVALSHA;"},
		{"acquire", "NOPERM this user has no permissions to access one of the keys used as arguments", "the user may not access the keys;"},
		{"acquire", "NOPERM User app has no permissions to access the '{p:k}' key", "the user may not access the keys;"},
		{"acquire", "ERR The user executing the script can't run this command or subcommand script: 8c94, on @user_script:2.", "the user may not run a command; a grant runs"},
		{"acquire", "ERR ACL failure in script: User app has no permissions to run the 'set' command script: 8c94, on @user_script:2.", "the user may not run SET; a grant runs"},
		{"renew", "ERR The user executing the script can't access at least one of the keys mentioned in the command script: 1", `the user may not access the keys; a renewal runs EVALSHA or EVAL of a script calling GET, PEXPIRE and SET on keys "{p:k}" and "{p:k}:fence"`},
		{"release", "ERR The user executing the script can't publish to the channel mentioned in the command script: 1", `the user may not use the channel; a release runs EVALSHA or EVAL of a script calling GET, SET and DEL on keys "{p:k}" and "{p:k}:fence" and PUBLISH on channel "{p:k}:released"`},
		{"notify", "NOPERM this user has no permissions to run the 'subscribe' command", `the user may not run SUBSCRIBE; a wait runs SUBSCRIBE on channel "{p:k}:released"`},
		{"notify", "NOPERM this user has no permissions to access one of the channels used as arguments", "the user may not use the channel; a wait runs SUBSCRIBE"},
	} {
		err := redisscript.Translate(tt.op, lock, "k", fmt.Errorf("wrapped: %w", redisError(tt.reply)))
		require.ErrorContains(t, err, tt.want, tt.reply)
		require.ErrorContains(t, err, tt.reply, "the server's own words stay")
	}
	for _, reply := range []string{"ERR value is not an integer or out of range script: 1", "WRONGTYPE Operation against a key holding the wrong kind of value"} {
		err := redisscript.Translate("acquire", lock, "k", redisError(reply))
		require.Equal(t, `acquire "k": `+reply, err.Error())
		require.False(t, redisscript.IsPermission(redisError(reply)))
	}
	require.False(t, redisscript.IsPermission(errors.New("NOPERM from no server")), "only server replies")
}

func TestPrefixErrorsAreInvalid(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "{", strings.Repeat("p", 65)} {
		require.ErrorIs(t, redisscript.CheckPrefix("F", prefix), aegis.ErrInvalid, "%q", prefix)
	}
}
