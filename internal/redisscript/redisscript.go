// Package redisscript holds the Lua scripts, key names and error
// translation that the Redis backends (lease/redislease and lease/redlock)
// share: the single-node lease that issues a fencing token.
//
// A lease key K under prefix P lives in three names that share one hash
// slot, so the scripts work on Redis Cluster:
//
//	{P K}           the lock: its value is the grant's random owner, with a TTL
//	{P K}:fence     the token counter: INCR on every grant, never expires
//	{P K}:released  the pub/sub channel a release publishes to
//
// The hash tag is "P K" up to the first '}' (P holds no brace and is not
// empty, so the tag is never empty and is the same for all three names).
// Lock names end in '}', fence names in ":fence": no key K's lock name is
// another key's fence name.
//
// Every script is one round trip: it runs by SHA (EVALSHA) and falls back
// to EVAL once when the server does not have it cached (after a restart or a
// failover), which loads it for the next calls.
package redisscript

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
)

// DefaultPrefix is the key prefix of the backends' Config.Prefix default.
const DefaultPrefix = "aegis:"

// CheckPrefix reports whether prefix can prefix lease keys: not empty, no
// brace (it is the start of a hash tag), no NUL, at most 64 bytes. field
// names the configuration field in the error, which wraps aegis.ErrInvalid.
func CheckPrefix(field, prefix string) error {
	switch {
	case prefix == "":
		return fmt.Errorf("%w: %s is empty", aegis.ErrInvalid, field)
	case len(prefix) > 64:
		return fmt.Errorf("%w: %s is %d bytes, at most 64 are allowed", aegis.ErrInvalid, field, len(prefix))
	case strings.ContainsAny(prefix, "{}\x00"):
		return fmt.Errorf("%w: %s %q holds '{', '}' or NUL; it starts a hash tag, so it may not", aegis.ErrInvalid, field, prefix)
	}
	return nil
}

// Lock is the Redis name of a lease key's lock, "{" + prefix + key + "}";
// its counter and its channel are named after it.
type Lock string

// LockFor returns the lock of key under prefix.
func LockFor(prefix, key string) Lock { return Lock("{" + prefix + key + "}") }

// Fence is the name of the lock's token counter.
func (l Lock) Fence() string { return string(l) + ":fence" }

// Channel is the name of the pub/sub channel a release publishes on.
func (l Lock) Channel() string { return string(l) + ":released" }

// ACLRules returns the rules of a least-privilege Redis user for prefix:
// only the prefix's keys and channels, only the commands the scripts and
// the client send. The backends' package docs list them; their tests create
// a user with exactly these rules.
func ACLRules(prefix string) []string {
	return []string{
		"resetkeys", "~{" + prefix + "*",
		"resetchannels", "&{" + prefix + "*",
		"-@all",
		// the scripts, run by SHA with the EVAL fallback (no SCRIPT LOAD)
		"+evalsha", "+eval",
		// what the scripts call
		"+set", "+get", "+incr", "+pttl", "+pexpire", "+del", "+publish",
		// wake-ups: the one pub/sub connection, its health check
		"+subscribe", "+unsubscribe", "+ping",
		// Config.WaitReplicas
		"+wait",
	}
}

// repair is the part of renew and release that restores a lost counter
// (KEYS[2]) to the lease's token (ARGV[3]). A counter that is not a number
// (a foreign writer) is left for the next grant's INCR to report.
const repair = `
  local t = tonumber(ARGV[3])
  local c = redis.call('GET', KEYS[2])
  if t > 0 and (not c or (tonumber(c) or t) < t) then
    redis.call('SET', KEYS[2], ARGV[3])
  end`

// The scripts. KEYS[1] is always the lock. Each one reads and writes only
// the lock and its counter (and publishes on the key's channel), so it runs
// on the node of their hash slot.
var (
	// acquire grants the lock (KEYS[1]) if it is free and bumps the token
	// (KEYS[2], the fence key) in the same atomic step. It returns the token
	// (> 0), or, when the lock is held, minus its remaining TTL in ms (<= 0;
	// 0 when it has none, which only a foreign writer can cause). When the
	// lock already holds this very call's owner value, the call ran before
	// and its reply was lost (go-redis resends after a network error): it
	// returns that grant's token again instead of "held".
	acquire = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return tonumber(redis.call('GET', KEYS[2]))
end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then left = 0 end
return -left`)

	// renew extends the lock's TTL when it still holds the grant's owner
	// value (ARGV[1]). It returns 1 (Done), 0 when the lock is gone (Gone)
	// or -1 when another owner holds it (Taken). A holder that finds the
	// counter (KEYS[2]) missing or below its own token (ARGV[3]; 0: no
	// check) restores it, so that a counter deleted or evicted while the
	// lease is held does not send the next grant's token back.
	renew = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
` + repair + `
  return 1
end
if v then return -1 end
return 0`)

	// release deletes the lock under the same comparison, restores the
	// counter as renew does, and publishes on the key's channel (ARGV[2])
	// so that waiters wake at once. It returns 1, 0 or -1 as renew does;
	// when the lease was lost nothing changes.
	release = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
` + repair + `
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
if v then return -1 end
return 0`)

	// raise sets the counter (KEYS[1], a fence key) to ARGV[1] when it is
	// lower, and returns the counter. Redlock uses it so that every node of
	// a grant's majority ends at least at the grant's token.
	raise = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local t = tonumber(ARGV[1])
if c < t then
  redis.call('SET', KEYS[1], ARGV[1])
  return t
end
return c`)
)

// Owner is a lease's Owner field: the random value the lock holds, then
// ':' and the token. The scripts compare only the value (it is unique to
// the grant); the token is bound to it here, so that a lease whose token
// was changed is not taken for the grant (Redlock's nodes hold different
// counters, so no node could compare the token).
func Owner(value string, token int64) string {
	return value + ":" + strconv.FormatInt(token, 10)
}

// Value returns the lock value of a lease whose Owner was made by Owner,
// and false when the Owner is malformed or does not carry the lease's
// token.
func Value(l *aegis.Lease) (string, bool) {
	value, token, ok := strings.Cut(l.Owner, ":")
	if !ok || value == "" || token == "" || token[0] < '1' || token[0] > '9' {
		return "", false // Owner writes no sign and no leading zero
	}
	t, err := strconv.ParseInt(token, 10, 64)
	if err != nil || t != int64(l.Token) {
		return "", false
	}
	return value, true
}

// Millis is ttl in whole milliseconds for PX and PEXPIRE, rounded up so
// that the server never holds a lease shorter than asked.
func Millis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// Call is one call of a script with its keys and arguments, to run alone
// (Run) or with others in one pipeline (RunAll).
type Call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// AcquireCall is the grant of lock to owner for ttl; read its reply with
// AcquireReply.
func AcquireCall(lock Lock, owner string, ttl time.Duration) Call {
	return Call{acquire, []string{string(lock), lock.Fence()}, []any{owner, Millis(ttl)}}
}

// RenewCall extends lock to ttl if it holds value, and restores its
// counter to token if it is lower (0: no check); read its reply with
// Result.
func RenewCall(lock Lock, value string, token int64, ttl time.Duration) Call {
	return Call{renew, []string{string(lock), lock.Fence()}, []any{value, Millis(ttl), token}}
}

// ReleaseCall deletes lock if it holds value, restores its counter to
// token if it is lower (0: no check), and wakes its waiters; read its
// reply with Result.
func ReleaseCall(lock Lock, value string, token int64) Call {
	return Call{release, []string{string(lock), lock.Fence()}, []any{value, lock.Channel(), token}}
}

// Run runs the call on c: by SHA, and by EVAL when c lacks the script.
func (call Call) Run(ctx context.Context, c redis.Scripter) *redis.Cmd {
	return call.script.Run(ctx, c, call.keys, call.args...)
}

// Pipeliner is a client that sends pipelines (every go-redis client).
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

// RunAll runs calls in one pipeline, one round trip, and returns their
// replies in order. Calls that the server refuses with NOSCRIPT are sent
// again by EVAL, in a second pipeline. Each script is atomic; the calls
// are independent of one another.
func RunAll(ctx context.Context, c Pipeliner, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, call := range calls {
		cmds[i] = call.script.EvalSha(ctx, pipe, call.keys, call.args...)
	}
	_, _ = pipe.Exec(ctx) // each reply carries its own error
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := c.Pipeline()
		for _, i := range again {
			cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}

// AcquireReply reads the reply of an AcquireCall: the token when the lock
// was granted, or token 0 and the lock's remaining TTL when it is held.
func AcquireReply(cmd *redis.Cmd) (token int64, left time.Duration, err error) {
	v, err := cmd.Int64()
	if err != nil {
		return 0, 0, err
	}
	if v > 0 {
		return v, 0, nil
	}
	return 0, time.Duration(-v) * time.Millisecond, nil
}

// Outcome is what a renew or release found.
type Outcome int64

const (
	// Taken: another owner holds the lock; nothing changed.
	Taken Outcome = -1
	// Gone: the lock does not exist (expired, released, deleted); nothing
	// changed.
	Gone Outcome = 0
	// Done: the lock held the value and is now extended, or deleted.
	Done Outcome = 1
)

// Reason says why a lease is lost, for its ErrLost error; "" for Done.
func (o Outcome) Reason() string {
	switch o {
	case Taken:
		return "another owner holds the key"
	case Gone:
		return "the key is gone (the lease expired, or was released or deleted)"
	}
	return ""
}

// Result reads the reply of a RenewCall or ReleaseCall.
func Result(cmd *redis.Cmd) (Outcome, error) {
	v, err := cmd.Int64()
	if err != nil {
		return Gone, err
	}
	switch o := Outcome(v); o {
	case Taken, Gone, Done:
		return o, nil
	}
	return Gone, fmt.Errorf("unexpected reply %d from Redis", v)
}

// Acquire runs an AcquireCall on c and reads its reply.
func Acquire(ctx context.Context, c redis.Scripter, lock Lock, owner string, ttl time.Duration) (token int64, left time.Duration, err error) {
	return AcquireReply(AcquireCall(lock, owner, ttl).Run(ctx, c))
}

// Renew runs a RenewCall on c and reads its reply.
func Renew(ctx context.Context, c redis.Scripter, lock Lock, value string, token int64, ttl time.Duration) (Outcome, error) {
	return Result(RenewCall(lock, value, token, ttl).Run(ctx, c))
}

// Release runs a ReleaseCall on c and reads its reply.
func Release(ctx context.Context, c redis.Scripter, lock Lock, value string, token int64) (Outcome, error) {
	return Result(ReleaseCall(lock, value, token).Run(ctx, c))
}

// Raise runs the raise script on c: the fence counter becomes at least
// token. It returns the counter after the call.
func Raise(ctx context.Context, c redis.Scripter, lock Lock, token int64) (int64, error) {
	return raise.Run(ctx, c, []string{lock.Fence()}, token).Int64()
}

// Translate turns an error of the Redis client into the backends' error for
// op ("acquire", "renew", "release", "notify", "raise") on key, whose lock
// is lock. It is the one place where go-redis errors are interpreted: a
// context error stays matchable with errors.Is, a missing permission says
// which command, key or channel the call needed, and redis.Nil (no script
// of ours returns nil) becomes a protocol error. It never adds the owner
// value to the message.
func Translate(op string, lock Lock, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.Nil):
		return fmt.Errorf("%s %q: unexpected nil reply from Redis", op, key)
	case IsPermission(err):
		return fmt.Errorf("%s %q: the Redis user lacks a permission: %s (see ACLRules): %w", op, key, denied(op, lock, err), err)
	case redis.HasErrorPrefix(err, "READONLY"):
		return fmt.Errorf("%s %q: the server is a read-only replica, not the primary: %w", op, key, err)
	}
	return fmt.Errorf("%s %q: %w", op, key, err)
}

// IsPermission reports whether err is Redis refusing a command for the
// user's ACL: NOPERM for a command sent directly, and, inside a script,
// "ERR The user executing the script can't …" (Redis 7.0) or "ERR ACL
// failure in script: …" (Redis 7.2 and later).
func IsPermission(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	s := rerr.Error()
	return strings.HasPrefix(s, "NOPERM") ||
		strings.Contains(s, "The user executing the script can't") ||
		strings.Contains(s, "ACL failure in script")
}

// refusedCommand finds the command a permission error names ("… to run the
// 'set' command"), if it names one.
var refusedCommand = regexp.MustCompile(`'([a-zA-Z|_-]+)' command`)

// denied says what op was refused, from the error's words where Redis says
// (which vary between versions) and from what op sends.
func denied(op string, lock Lock, err error) string {
	var what string
	switch s := err.Error(); {
	case refusedCommand.MatchString(s):
		what = "the user may not run " + strings.ToUpper(refusedCommand.FindStringSubmatch(s)[1])
	case strings.Contains(s, "channel"):
		what = "the user may not use the channel"
	case strings.Contains(s, "key"):
		what = "the user may not access the keys"
	default:
		what = "the user may not run a command"
	}
	switch op {
	case "acquire":
		return fmt.Sprintf("%s; a grant runs EVALSHA or EVAL of a script calling SET, GET, INCR and PTTL on keys %q and %q", what, lock, lock.Fence())
	case "renew":
		return fmt.Sprintf("%s; a renewal runs EVALSHA or EVAL of a script calling GET, PEXPIRE and SET on keys %q and %q", what, lock, lock.Fence())
	case "release":
		return fmt.Sprintf("%s; a release runs EVALSHA or EVAL of a script calling GET, SET and DEL on keys %q and %q and PUBLISH on channel %q", what, lock, lock.Fence(), lock.Channel())
	case "notify":
		return fmt.Sprintf("%s; a wait runs SUBSCRIBE on channel %q (and UNSUBSCRIBE, PING on that connection)", what, lock.Channel())
	case "raise":
		return fmt.Sprintf("%s; raising a counter runs EVALSHA or EVAL of a script calling GET and SET on key %q", what, lock.Fence())
	}
	return what
}

// CheckTimeout bounds the backends' checks of the servers in New.
const CheckTimeout = time.Second

// CheckEviction asks c's server (every primary of a Cluster or Ring) for
// its maxmemory-policy and returns an error wrapping aegis.ErrInvalid when
// the policy can evict a key without a TTL (allkeys-*): the token counter
// has none, and a counter evicted while no lease is held restarts tokens
// at 1. noeviction and volatile-* keep it (volatile-* may evict a live
// lock, which ends that lease early; the token still increases). A server
// that does not answer, or a user that may not run CONFIG GET (the
// least-privilege user of ACLRules may not), is not checked: the check
// costs no permission and never keeps a Locker from starting. name says
// which server it is in the error ("", or "node 2 ").
func CheckEviction(ctx context.Context, c redis.UniversalClient, name string) error {
	check := func(ctx context.Context, c redis.UniversalClient) error {
		policy, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return nil
		}
		if p := policy["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
			return fmt.Errorf("%w: %sRedis %s has maxmemory-policy %s, which can evict the token counters (they have no TTL), so tokens could restart at 1: set maxmemory-policy to noeviction or a volatile-* policy, or accept it with Config.SkipPolicyCheck",
				aegis.ErrInvalid, name, addr(c), p)
		}
		return nil
	}
	var errs []error
	var mu sync.Mutex
	collect := func(ctx context.Context, c *redis.Client) error {
		if err := check(ctx, c); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	}
	switch cc := c.(type) {
	case *redis.ClusterClient:
		_ = cc.ForEachMaster(ctx, collect)
		return errors.Join(errs...)
	case *redis.Ring:
		_ = cc.ForEachShard(ctx, collect)
		return errors.Join(errs...)
	}
	return check(ctx, c)
}

// addr is the address c dials, for errors ("" when its type hides it).
func addr(c redis.UniversalClient) string {
	if o, ok := c.(interface{ Options() *redis.Options }); ok {
		return o.Options().Addr
	}
	return "server"
}
