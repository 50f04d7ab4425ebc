// Package redisboard is an elect.Board on Redis whose observers are pushed:
// Publish (a new leader or term) and Withdraw publish the election's name on
// its channel in the same script, and Watch subscribes to it, on one pub/sub
// connection per Board shared by its watchers (internal/redisnotify).
//
// An election's keys share a hash tag, "{" + Prefix + "elect:" + election +
// "}": ":leader", the record (a hash expiring with the term's TTL, in the
// server's time), ":top", the greatest token ever published (no expiry: a
// deposed leader is refused even after its successor's record expired or
// was withdrawn), and the channel ":changed".
//
// What it does not do: survive a failover that loses writes (an
// asynchronous replica promoted without the record or ":top" lets a
// deposed leader publish again; the record is advisory, the lease is the
// truth), or push while the pub/sub connection is down: a message published
// meanwhile is lost, and the Board wakes every watcher when go-redis has
// resubscribed, so that they read the record. A crashed leader's record
// expires without a message; elect.Observe reads it again at its expiry
// (ReadExpiry).
//
// Its scripts (EVALSHA, EVAL) run GET, SET, HGET, HMGET, HSET, DEL,
// PEXPIRE, PTTL and PUBLISH on the election's keys, and Watch SUBSCRIBEs to
// its channel: a least-privilege Redis user needs those on the prefix's
// keys and channels.
package redisboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/redisnotify"
	"github.com/aegislab/aegis/internal/redisscript"
)

var (
	_ elect.Board        = (*Board)(nil)
	_ elect.Watcher      = (*Board)(nil)
	_ elect.ExpiryReader = (*Board)(nil)
)

// linger is how long an election's subscription outlives its last watcher
// (an observer watches again at once after a lost connection).
const linger = 2 * time.Second

// Config configures a Board. The zero value is valid.
type Config struct {
	// Prefix is put before every key, inside the hash tag. It may not hold
	// '{', '}' or NUL, and is at most 64 bytes. Default "aegis:".
	Prefix string
}

// Board is the leader records of elections on Redis. It is safe for
// concurrent use. Close it to end its pub/sub connection; the client stays
// the caller's.
type Board struct {
	client redis.UniversalClient
	prefix string
	hub    *redisnotify.Hub
}

// New returns a Board on client. A nil cfg means defaults. A nil client or
// a bad Config.Prefix is an error wrapping aegis.ErrInvalid. New sends
// nothing to the server; the pub/sub connection opens at the first Watch.
func New(client redis.UniversalClient, cfg *Config) (*Board, error) {
	if client == nil {
		return nil, badinput.Errorf("redisboard: client is nil")
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, badinput.Errorf("redisboard: client is a nil %T", client)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = cmp.Or(c.Prefix, redisscript.DefaultPrefix)
	if err := redisscript.CheckPrefix("Config.Prefix", c.Prefix); err != nil {
		return nil, fmt.Errorf("redisboard: %w", err)
	}
	return &Board{
		client: client,
		prefix: c.Prefix,
		hub: redisnotify.New(func() *redis.PubSub {
			return client.Subscribe(context.Background())
		}, linger),
	}, nil
}

// Close ends the pub/sub connection; every watch's channel is closed. It
// does not close the client. Close is idempotent.
func (b *Board) Close() error { return b.hub.Close() }

// keys of an election: the record, the greatest token, the channel.
type keys struct{ leader, top, channel string }

func (b *Board) keys(election string) keys {
	base := "{" + b.prefix + "elect:" + election + "}"
	return keys{base + ":leader", base + ":top", base + ":changed"}
}

// publishScript writes the record unless a greater token was ever
// published, and publishes the election's name when the leader or term
// changed (a refresh of the live term tells no one). Tokens are compared
// as decimal strings: Lua's numbers are doubles, exact only to 2^53.
var publishScript = redis.NewScript(`
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local top = redis.call('GET', KEYS[2])
if top and less(ARGV[4], top) then return 0 end
local cur = redis.call('HGET', KEYS[1], 'token')
redis.call('SET', KEYS[2], ARGV[4])
redis.call('HSET', KEYS[1], 'node', ARGV[3], 'token', ARGV[4], 'since', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if cur ~= ARGV[4] then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
return 1
`)

// withdrawScript deletes the record if it is still the term's.
var withdrawScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') == ARGV[3] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return 1
`)

// readScript returns the live record and its time left in milliseconds,
// or nil.
var readScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'node', 'token', 'since')
if not v[2] then return false end
return {v[1], v[2], v[3], tostring(redis.call('PTTL', KEYS[1]))}
`)

// Publish implements elect.Board. One script. A token below 1 or a TTL
// under a millisecond is an error wrapping aegis.ErrInvalid; a token below
// the greatest published is one wrapping aegis.ErrStale.
func (b *Board) Publish(ctx context.Context, election string, l elect.Leader, ttl time.Duration) error {
	if l.Token < 1 {
		return badinput.Errorf("redisboard: publish %q: token %d is not positive", election, l.Token)
	}
	ms := redisscript.Millis(ttl)
	if ms < 1 {
		return badinput.Errorf("redisboard: publish %q: ttl %s is shorter than 1ms", election, ttl)
	}
	k := b.keys(election)
	tok := strconv.FormatInt(int64(l.Token), 10)
	n, err := publishScript.Run(ctx, b.client, []string{k.leader, k.top},
		k.channel, election, l.Node, tok, l.Since.UnixMicro(), ms).Int()
	if err != nil {
		return fmt.Errorf("redisboard: publish %q: %w", election, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: election %q has had a token greater than %d", aegis.ErrStale, election, l.Token)
	}
	return nil
}

// Withdraw implements elect.Board. One script.
func (b *Board) Withdraw(ctx context.Context, election string, token aegis.Token) error {
	k := b.keys(election)
	err := withdrawScript.Run(ctx, b.client, []string{k.leader}, k.channel, election, strconv.FormatInt(int64(token), 10)).Err()
	if err != nil {
		return fmt.Errorf("redisboard: withdraw %q: %w", election, err)
	}
	return nil
}

// Read implements elect.Board. One script.
func (b *Board) Read(ctx context.Context, election string) (elect.Leader, error) {
	l, _, err := b.ReadExpiry(ctx, election)
	return l, err
}

// ReadExpiry implements elect.ExpiryReader. One script; the time left is
// the server's PTTL.
func (b *Board) ReadExpiry(ctx context.Context, election string) (elect.Leader, time.Duration, error) {
	v, err := readScript.Run(ctx, b.client, []string{b.keys(election).leader}).StringSlice()
	if errors.Is(err, redis.Nil) {
		return elect.Leader{}, 0, nil
	}
	var l elect.Leader
	var left time.Duration
	if err == nil {
		l, left, err = decodeRead(v)
	}
	if err != nil {
		return elect.Leader{}, 0, fmt.Errorf("redisboard: read %q: %w", election, err)
	}
	return l, left, nil
}

// decodeRead decodes readScript's answer: the record's node, token and
// since (µs), and its PTTL. An error for another number of fields, a field
// that is not a decimal integer, or a token below 1 (written past the
// Board); a PTTL below zero (-1: no expiry, written past the Board; -2:
// gone since) is no time left.
func decodeRead(v []string) (elect.Leader, time.Duration, error) {
	if len(v) != 4 {
		return elect.Leader{}, 0, fmt.Errorf("the record has %d fields, not 4", len(v))
	}
	var n [3]int64
	for i, name := range []string{"token", "since", "PTTL"} {
		var err error
		if n[i], err = strconv.ParseInt(v[i+1], 10, 64); err != nil {
			return elect.Leader{}, 0, fmt.Errorf("the record's %s: %w", name, err)
		}
	}
	token, since, left := n[0], n[1], max(n[2], 0)
	if token < 1 {
		return elect.Leader{}, 0, fmt.Errorf("the record's token %d is not positive", token)
	}
	return elect.Leader{Node: v[0], Token: aegis.Token(token), Since: time.UnixMicro(since)}, time.Duration(left) * time.Millisecond, nil
}

// Watch implements elect.Watcher: it subscribes to the election's channel
// (on the Board's shared connection) and returns once the server has
// confirmed the subscription, or after 2s without a confirmation (a
// message is then pushed only once it is confirmed). The channel also
// receives when go-redis resubscribes after a reconnection (a message may
// have been lost), and is closed when ctx ends or the Board is closed. A
// user without +subscribe gets the server's refusal.
func (b *Board) Watch(ctx context.Context, election string) (<-chan struct{}, error) {
	in, stop, err := b.hub.Notify(ctx, b.keys(election).channel)
	if err != nil {
		return nil, fmt.Errorf("redisboard: watch %q: %w", election, err)
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-in:
				if !ok {
					return // the Board was closed
				}
				select {
				case out <- struct{}{}:
				default: // a wake is pending: it covers this change too
				}
			}
		}
	}()
	return out, nil
}
