// Package natslease is an aegis.Locker on a NATS JetStream key-value
// bucket, replicated on a cluster (three servers by default), whose
// revision is the fencing token.
//
// # How
//
// Every lock of a Locker is a key of one bucket (Config.Bucket, created by
// New when missing with per-key TTLs, one value of history and
// Config.Replicas replicas). A lease key K is the bucket key BucketKey(K).
// A grant is the bucket's Create: a publish of the grant's random owner id
// with the key's TTL (a per-message TTL, nats-server 2.11 or newer) that
// expects the key to have no message; when it has one (a release's delete
// marker, an expiry's marker), that message is read from the stream's
// leader and the publish is made again expecting it. The token is the
// revision the grant wrote: the stream sequence of its message. A stream's
// sequence grows with every write to the bucket, so every grant's token is
// greater than every earlier grant's, for every key. A renewal publishes
// the owner id again with the new TTL, expecting the key's last revision
// to be the one this lease wrote last (the bucket's Update, which cannot
// carry a TTL itself); a release is a Delete expecting that last revision
// (jetstream.LastRevision). An expected revision that does not match means
// another write came in between: the lease is lost, unless the key's last
// message, read from the stream's leader, is still this grant's (a renewal
// whose answer was lost, a renewal through another Locker), in which case
// the write is made again expecting that revision. A key whose TTL passed
// is removed by the stream's leader, which leaves a marker message that
// wakes watchers.
//
// [aegis.Acquire] waits through [Locker.Notify], a watch on the key (an
// ordered consumer): a release, and an expiry's marker, wake the waiters.
//
// Keys: a bucket key holds only ASCII letters, digits and "-_/=." and no
// empty "."-separated token, so a lease key is mapped: letters, digits,
// '-', '_' and '/' are kept, every other byte is written =XX (two upper
// case hex digits; '.' and '=' included): "jobs/nightly" stays as it is,
// "invoice.2026" becomes "invoice=2E2026". Different keys map to different
// bucket keys, at most three times as long (600 bytes for a 200-byte key).
// Nothing is refused beyond driver.CheckKey's rules.
//
// TTLs: NATS counts a message's TTL in whole seconds and truncates (a TTL
// of 1.5 s is kept 1 s), its minimum being 1 s. A grant takes a whole
// number of seconds and refuses any other TTL with aegis.ErrInvalid, as
// etcdlease does; Renew rounds its TTL up to the next second, because its
// callers hand it a remaining time (lockAtLeastFor, Held.ReleaseAfter).
// Lease.TTL and Lease.Deadline keep the TTL asked for.
//
// # Guarantees
//
// With a majority of the bucket's replicas up: at most one live grant per
// key (Create and the expected revisions are decided by the stream's RAFT
// leader), and strictly increasing tokens per key. A key expires TTL after
// its last write as the stream leader's clock counts it (its message's
// timestamp plus its TTL); the holder's local Deadline passes before that.
//
// # What it does not guarantee
//
//   - That a holder paused or cut off past its TTL has stopped working: its
//     renewal fails (aegis.Hold cancels its context at the deadline), but
//     its writes must go through the fence (package fence) with its token.
//   - Progress during a leader election: when the server leading the
//     bucket's stream dies, the others elect a new leader 4 to 9 s later
//     (nats-server's RAFT timings, not configurable), and no grant,
//     renewal or release is answered meanwhile (each request is sent again
//     until its context ends). A lease whose TTL is shorter than that can
//     expire in an election: take TTLs well above 10 s where a server may
//     die (the tests' leader kill holds a 15 s lease through one).
//   - Expiry on any clock but the stream leader's: a leader change hands
//     the TTL timers to the new leader, which counts from each message's
//     timestamp (the old leader's clock). A clock that jumps, or a new
//     leader whose clock is ahead, ends leases early; one behind, late.
//   - Fresh reads from a follower: the bucket allows direct gets, which any
//     replica answers, possibly behind the leader (a released key still
//     shows its value there for a moment). This package decides nothing on
//     such a read: its writes expect a revision, and the reads it makes
//     before a write go to the stream's leader (STREAM.MSG.GET). A leader
//     that was deposed and has not noticed may still answer such a read;
//     the write after it, decided by the new leader, then fails, which
//     costs that call (ErrHeld, or ErrLost for a lease that was live),
//     never a second holder.
//   - A grant whose answer was lost (a timeout after the server took it)
//     is not held by anyone and blocks the key until its TTL passes.
//   - Deleting the bucket, or its stream, restarts the revisions at 1: a
//     fence that saw greater tokens then refuses every new holder.
//   - With Config.Replicas 1 the bucket lives on one server, whose loss
//     stops every lease (and whose disk loss loses them, with the tokens).
//
// Only the default JetStream API (no domain, no API prefix) is supported.
package natslease

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
	"github.com/aegislab/aegis/internal/badinput"
	"github.com/aegislab/aegis/internal/owner"
)

var (
	_ aegis.Locker   = (*Locker)(nil)
	_ aegis.Notifier = (*Locker)(nil)
)

// DefaultBucket is Config.Bucket's default.
const DefaultBucket = "aegis_leases"

// defaultRequestTimeout is Config.RequestTimeout's default.
const defaultRequestTimeout = 5 * time.Second

// markerTTL is how long the bucket keeps the marker an expiry leaves, so
// that a watcher that was briefly away still sees the key gone.
const markerTTL = time.Minute

// bucketRe is what NATS accepts as a bucket name.
var bucketRe = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Config configures a Locker. The zero value is valid.
type Config struct {
	// Bucket is the key-value bucket of every lock. New creates it when
	// missing, and refuses one that exists without per-key TTLs or with
	// another number of replicas. Letters, digits, '-' and '_', at most
	// 64 bytes. Default "aegis_leases".
	Bucket string
	// Replicas is the bucket's number of replicas, 1 to 5. Default 3: a
	// lease survives the loss of one server of three. 1 puts every lease
	// on one server.
	Replicas int
	// MaxTTL is the longest TTL accepted. Default aegis.MaxTTL (24 h).
	MaxTTL time.Duration
	// RequestTimeout bounds every call (New's bucket set-up, TryAcquire,
	// Renew, Release, Notify's watch) whose context has no deadline; a
	// context with a deadline decides alone. Default 5 s. Negative is
	// invalid.
	RequestTimeout time.Duration
}

// Locker is a lock table on a JetStream key-value bucket. It is safe for
// concurrent use. It holds no goroutine of its own (each Notify's watch
// has one until its stop function is called); the connection stays the
// caller's.
type Locker struct {
	js             jetstream.JetStream
	kv             jetstream.KeyValue
	bucket         string
	maxTTL         time.Duration
	requestTimeout time.Duration

	mu sync.Mutex
	// last is the revision each held lease (by Owner) wrote last, so that
	// a renewal or release expects it without a read first. Entries of
	// leases past their deadline are dropped as new ones come.
	last map[string]written
}

// written is a lease's last write.
type written struct {
	revision uint64
	deadline time.Time
}

// New returns a Locker on js, creating its bucket when missing (one
// request to the cluster, bounded by Config.RequestTimeout). A nil cfg
// means defaults. Bad configuration, a nil js, a JetStream with a domain or
// an API prefix, a server older than 2.11 and a bucket of another make are
// errors wrapping aegis.ErrInvalid that say what is wrong; a cluster that
// does not answer is an error that names its servers (host:port only).
func New(js jetstream.JetStream, cfg *Config) (*Locker, error) {
	if js == nil {
		return nil, badinput.Errorf("natslease: JetStream is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Bucket = cmp.Or(c.Bucket, DefaultBucket)
	c.Replicas = cmp.Or(c.Replicas, 3)
	c.MaxTTL = cmp.Or(c.MaxTTL, aegis.MaxTTL)
	switch {
	case len(c.Bucket) > 64 || !bucketRe.MatchString(c.Bucket):
		return nil, badinput.Errorf("natslease: Config.Bucket %q is not a bucket name: letters, digits, '-' and '_', at most 64 bytes", c.Bucket)
	case c.Replicas < 1 || c.Replicas > 5:
		return nil, badinput.Errorf("natslease: Config.Replicas %d is not 1 to 5", c.Replicas)
	case c.MaxTTL < time.Second:
		return nil, badinput.Errorf("natslease: Config.MaxTTL %s is shorter than 1s: NATS counts TTLs in whole seconds", c.MaxTTL)
	case c.RequestTimeout < 0:
		return nil, badinput.Errorf("natslease: Config.RequestTimeout %s is negative", c.RequestTimeout)
	}
	if err := driver.CheckTTL(c.MaxTTL, c.MaxTTL); err != nil {
		return nil, fmt.Errorf("natslease: Config.MaxTTL: %w", err)
	}
	if o := js.Options(); o.APIPrefix != "" || o.Domain != "" {
		return nil, badinput.Errorf("natslease: the JetStream has a domain or an API prefix: only the default JetStream API is supported")
	}
	c.RequestTimeout = cmp.Or(c.RequestTimeout, defaultRequestTimeout)
	l := &Locker{js: js, bucket: c.Bucket, maxTTL: c.MaxTTL, requestTimeout: c.RequestTimeout, last: map[string]written{}}
	ctx, cancel := context.WithTimeout(context.Background(), c.RequestTimeout)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         c.Bucket,
		Description:    "aegis leases (lease/natslease)",
		History:        1,
		Replicas:       c.Replicas,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: markerTTL,
	})
	switch {
	case errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported):
		return nil, badinput.Errorf("natslease: the NATS server has no per-key TTLs (nats-server 2.11 or newer has): %w", err)
	case errors.Is(err, jetstream.ErrBucketExists):
		if kv, err = l.existing(ctx, c); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, l.fail("create bucket", c.Bucket, err)
	}
	l.kv = kv
	return l, nil
}

// existing opens the bucket that exists with another configuration than
// New's, and checks that it can hold leases.
func (l *Locker) existing(ctx context.Context, c Config) (jetstream.KeyValue, error) {
	kv, err := l.js.KeyValue(ctx, c.Bucket)
	if err != nil {
		return nil, l.fail("open bucket", c.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, l.fail("open bucket", c.Bucket, err)
	}
	switch {
	case st.LimitMarkerTTL() <= 0:
		return nil, badinput.Errorf("natslease: bucket %q exists without per-key TTLs (LimitMarkerTTL): delete it, or name another in Config.Bucket", c.Bucket)
	case st.TTL() > 0:
		return nil, badinput.Errorf("natslease: bucket %q expires every key after %s: delete it, or name another in Config.Bucket", c.Bucket, st.TTL())
	case st.Config().Replicas != c.Replicas:
		return nil, badinput.Errorf("natslease: bucket %q has %d replicas, Config.Replicas asks for %d", c.Bucket, st.Config().Replicas, c.Replicas)
	}
	return kv, nil
}

// BucketKey returns the bucket key of lease key key (see the package
// doc): letters, digits, '-', '_' and '/' as they are, every other byte as
// =XX. It does not check key.
func BucketKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '/' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String()
}

// Stream returns the name of the JetStream stream that holds the bucket
// (KV_ and its name): its leader decides every grant.
func (l *Locker) Stream() string { return "KV_" + l.bucket }

// subject is the stream subject of key's bucket key.
func (l *Locker) subject(key string) string { return "$KV." + l.bucket + "." + BucketKey(key) }

// bound gives ctx the Locker's RequestTimeout when it has no deadline.
func (l *Locker) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.requestTimeout)
}

// grantSeconds validates a grant's TTL: a whole number of seconds.
func (l *Locker) grantSeconds(ttl time.Duration) error {
	if err := driver.CheckTTL(ttl, l.maxTTL); err != nil {
		return err
	}
	if ttl%time.Second != 0 {
		return badinput.Errorf("ttl %s is not a whole number of seconds: NATS counts a key's TTL in whole seconds and would keep %s", ttl, ttl.Truncate(time.Second))
	}
	return nil
}

// TryAcquire grants key for ttl, a whole number of seconds, unless a live
// grant holds it (ErrHeld). One round trip when the key was never used or
// its marker is gone, three after a release or an expiry (the key's
// marker is read from the stream's leader, and written after). When ctx has no deadline
// it waits at most Config.RequestTimeout. A cluster that does not answer
// is an error that names its servers, never ErrHeld.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*aegis.Lease, error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	if err := l.grantSeconds(ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("natslease: acquire %q: %w", key, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	id := owner.New()
	start := time.Now()
	rev, err := l.create(ctx, key, id, ttl)
	if err != nil {
		if errors.Is(err, aegis.ErrHeld) {
			return nil, err
		}
		return nil, l.fail("acquire", key, err)
	}
	lease := &aegis.Lease{
		Key:      key,
		Token:    aegis.Token(rev),
		Owner:    id + ":" + strconv.FormatUint(rev, 10),
		TTL:      ttl,
		Deadline: driver.LocalDeadline(start, ttl),
	}
	l.remember(lease, rev)
	return lease, nil
}

// create is the bucket's Create of id on key with ttl: a publish that
// expects the key to have no message, and when it has one, a read of it
// from the stream's leader and, if it is a delete or an expiry's marker, a
// publish that expects it. It returns the revision written, or ErrHeld.
//
// jetstream's own Create reads the marker with a direct get, which any
// replica answers: one that has not yet applied a release still shows the
// released value, and a free key was refused (locktest's
// TokensIncreaseAcrossInstances failed 4 runs in 6 on the shared cluster).
func (l *Locker) create(ctx context.Context, key, id string, ttl time.Duration) (uint64, error) {
	rev, err := l.publish(ctx, key, id, 0, ttl)
	if !mismatch(err) {
		return rev, err
	}
	last, err := l.lastMessage(ctx, key)
	if err != nil {
		return 0, err
	}
	switch {
	case last == nil: // the marker went in between
		rev, err = l.publish(ctx, key, id, 0, ttl)
	case last.live() && string(last.Data) == id:
		// This grant: an attempt that got no answer had landed.
		return last.Seq, nil
	case last.live():
		return 0, aegis.ErrHeld
	default:
		rev, err = l.publish(ctx, key, id, last.Seq, ttl)
	}
	if mismatch(err) { // another grant came first
		return 0, aegis.ErrHeld
	}
	return rev, err
}

// Renew extends lease to ttl from now (the stream leader's time), rounded
// up to whole seconds at the server, if it still holds its key; otherwise
// an error wrapping ErrLost that says why. One round trip (a publish that
// expects the revision this Locker wrote last), two or three when that
// revision is not known or not the key's last (a read from the stream's
// leader first). When ctx has no deadline it waits at most
// Config.RequestTimeout. A cluster that does not answer is an error naming
// its servers, not ErrLost: the lease may still be live until its
// Deadline.
func (l *Locker) Renew(ctx context.Context, lease *aegis.Lease, ttl time.Duration) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	if err := driver.CheckTTL(ttl, l.maxTTL); err != nil {
		return err
	}
	id, ok := ownerID(lease)
	if !ok {
		return lost("renew", lease.Key, reasonForged)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("natslease: renew %q: %w", lease.Key, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	secs := (ttl + time.Second - 1).Truncate(time.Second)
	start := time.Now()
	err := l.write(ctx, "renew", lease, id, func(rev uint64) (uint64, error) {
		return l.publish(ctx, lease.Key, id, rev, secs)
	})
	if err != nil {
		return err
	}
	lease.TTL = ttl
	lease.Deadline = driver.LocalDeadline(start, ttl)
	l.mu.Lock()
	if w, ok := l.last[lease.Owner]; ok {
		w.deadline = lease.Deadline
		l.last[lease.Owner] = w
	}
	l.mu.Unlock()
	return nil
}

// Release deletes lease's key if lease still holds it (a delete marker
// that expects the key's last revision and carries the grant's owner id),
// waking its waiters; otherwise an error wrapping ErrLost as Renew's,
// changing nothing. A release whose first attempt landed unanswered finds
// its own marker and returns nil. One round trip when
// this Locker wrote the lease's last revision, two or three otherwise. When
// ctx has no deadline it waits at most Config.RequestTimeout; a cluster that
// does not answer is an error naming its servers (the key then expires
// with its TTL).
func (l *Locker) Release(ctx context.Context, lease *aegis.Lease) error {
	if err := aegis.CheckLease(lease); err != nil {
		return err
	}
	id, ok := ownerID(lease)
	if !ok {
		return lost("release", lease.Key, reasonForged)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("natslease: release %q: %w", lease.Key, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	sent := false
	err := l.write(ctx, "release", lease, id, func(rev uint64) (uint64, error) {
		sent = true
		return 0, l.retry(ctx, func(ctx context.Context) error {
			// The bucket's Delete (a DEL marker that expects rev), with
			// the owner id as its data, so that a release whose answer
			// was lost finds its own marker (write).
			m := &nats.Msg{Subject: l.subject(lease.Key), Data: []byte(id), Header: nats.Header{kvOperation: []string{"DEL"}}}
			_, err := l.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
			return err
		})
	})
	l.forget(lease)
	if sent && errors.Is(err, aegis.ErrLost) {
		// A delete that expected the grant's revision was refused: if the
		// key's last message is this lease's own marker, an attempt that
		// got no answer had landed.
		if last, rerr := l.lastMessage(ctx, lease.Key); rerr == nil && last.releasedBy(id) {
			return nil
		}
	}
	return err
}

// publish writes id on key with ttl, expecting the key's last revision to
// be expect (0: no message), and returns the revision written.
func (l *Locker) publish(ctx context.Context, key, id string, expect uint64, ttl time.Duration) (uint64, error) {
	var rev uint64
	err := l.retry(ctx, func(ctx context.Context) error {
		m := &nats.Msg{Subject: l.subject(key), Data: []byte(id), Header: nats.Header{}}
		ack, err := l.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(ttl))
		if err == nil {
			rev = ack.Sequence
		}
		return err
	})
	return rev, err
}

// attemptTimeout bounds one request of a call. A request that the
// stream's leader never saw gets no answer: one sent during an election
// (4 to 9 s after a leader dies, with nats-server's RAFT timings), or to a
// server that died. It is sent again while the call's context lasts.
const attemptTimeout = 2 * time.Second

// retry runs f, with attemptTimeout, until it gets an answer or ctx ends.
// Sending a write again is safe: each expects a revision, so a first
// attempt that landed makes the next one a mismatch, which the callers
// resolve by reading the key from the stream's leader.
func (l *Locker) retry(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !noAnswer(err) {
			return err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// noAnswer reports whether err says a request got no answer, or an answer
// that the cluster cannot serve it for now (503: no leader yet).
func noAnswer(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, errUnavailable) || errors.As(err, &apiErr) && apiErr.Code == 503
}

// write runs put, which writes lease's key expecting a revision and
// returns the revision it wrote (0: none to remember), expecting first the
// revision this Locker wrote last for lease, then, when that one is not
// known or not the key's last, the key's last revision read from the
// stream's leader, if that message is still lease's grant.
func (l *Locker) write(ctx context.Context, op string, lease *aegis.Lease, id string, put func(rev uint64) (uint64, error)) error {
	l.mu.Lock()
	w, known := l.last[lease.Owner]
	l.mu.Unlock()
	if known {
		rev, err := put(w.revision)
		if err == nil {
			l.remember(lease, rev)
			return nil
		}
		if !mismatch(err) {
			return l.fail(op, lease.Key, err)
		}
	}
	last, err := l.lastMessage(ctx, lease.Key)
	if err != nil {
		return l.fail(op, lease.Key, err)
	}
	if reason := last.heldBy(id, uint64(lease.Token)); reason != "" {
		l.forget(lease)
		return lost(op, lease.Key, reason)
	}
	rev, err := put(last.Seq)
	if mismatch(err) {
		l.forget(lease)
		return lost(op, lease.Key, reasonTaken)
	}
	if err != nil {
		return l.fail(op, lease.Key, err)
	}
	l.remember(lease, rev)
	return nil
}

// remember notes rev as lease's last write, and drops the notes of leases
// past their deadline (a renewal of those reads the key first).
func (l *Locker) remember(lease *aegis.Lease, rev uint64) {
	if rev == 0 {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) >= 64 {
		for o, w := range l.last {
			if now.After(w.deadline) {
				delete(l.last, o)
			}
		}
	}
	l.last[lease.Owner] = written{revision: rev, deadline: lease.Deadline}
}

func (l *Locker) forget(lease *aegis.Lease) {
	l.mu.Lock()
	delete(l.last, lease.Owner)
	l.mu.Unlock()
}

// mismatch reports whether err says the key's last revision was not the
// one a write expected.
func mismatch(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// ownerID returns the owner id of lease, whose Owner is "<id>:<token>";
// false when Owner is not of that form or names another token (an altered
// or foreign lease).
func ownerID(lease *aegis.Lease) (string, bool) {
	id, tok, ok := strings.Cut(lease.Owner, ":")
	if !ok || len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", false
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != tok || aegis.Token(n) != lease.Token {
		return "", false
	}
	return id, true
}

// Why a lease is lost, as the error says it.
const (
	reasonGone    = "key gone (released, or expired and removed by the stream's leader)"
	reasonExpired = "key expired (the stream's leader removed it at its TTL)"
	reasonTaken   = "key granted to another owner"
	reasonForged  = "the lease's owner does not match its token (an altered or foreign lease)"
)

// lost is aegis.ErrLost for op on key, saying why.
func lost(op, key, reason string) error {
	return fmt.Errorf("natslease: %s %q: %s: %w", op, key, reason, aegis.ErrLost)
}

// message is a stream message as the stream's leader returns it.
type message struct {
	Subject string    `json:"subject"`
	Seq     uint64    `json:"seq"`
	Header  []byte    `json:"hdrs"` // NATS/1.0 headers
	Data    []byte    `json:"data"`
	Time    time.Time `json:"time"`
}

// msgGetResponse is the answer to $JS.API.STREAM.MSG.GET.
type msgGetResponse struct {
	Message *message `json:"message"`
	Error   *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// errNoMessage is decodeMsgGet's error for a key without a message,
// errUnavailable for a cluster that cannot answer for now (503).
var (
	errNoMessage   = errors.New("no message")
	errUnavailable = errors.New("unavailable")
)

// decodeMsgGet decodes the answer to a STREAM.MSG.GET request.
func decodeMsgGet(b []byte) (*message, error) {
	var r msgGetResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("a stream message's answer is not JSON: %w", err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) {
			return nil, errNoMessage
		}
		err := fmt.Errorf("nats: %s (code %d, error code %d)", r.Error.Description, r.Error.Code, r.Error.ErrCode)
		if r.Error.Code == 503 {
			err = fmt.Errorf("%w: %w", errUnavailable, err)
		}
		return nil, err
	}
	if r.Message == nil || r.Message.Seq == 0 {
		return nil, errors.New("a stream message's answer has no message")
	}
	return r.Message, nil
}

// deletion returns why m is no live value: "" when it is one.
func (m *message) deletion() string {
	if len(m.Header) == 0 {
		return ""
	}
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil {
		return "" // not ours to judge: a value, held by whoever wrote it
	}
	if h.Get(jetstream.MarkerReasonHeader) != "" {
		return reasonExpired
	}
	if h.Get(kvOperation) != "" { // DEL or PURGE
		return reasonGone
	}
	return ""
}

// kvOperation is the header of a bucket's delete and purge markers.
const kvOperation = "KV-Operation"

// releasedBy reports whether m is the delete marker of a release by owner
// id (Release writes the id as the marker's data).
func (m *message) releasedBy(id string) bool {
	return m != nil && m.deletion() == reasonGone && string(m.Data) == id
}

// live reports whether m is a value (a grant), not a deletion.
func (m *message) live() bool { return m.deletion() == "" }

// heldBy returns "" when m is a live value of the grant of owner id whose
// token is token, and otherwise why not.
func (m *message) heldBy(id string, token uint64) string {
	if m == nil {
		return reasonGone
	}
	if why := m.deletion(); why != "" {
		return why
	}
	if string(m.Data) != id || m.Seq < token {
		return reasonTaken
	}
	return ""
}

// lastMessage reads key's last message from the stream's leader (a
// STREAM.MSG.GET, which only the leader answers, unlike a direct get);
// nil when the key has none.
func (l *Locker) lastMessage(ctx context.Context, key string) (*message, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": l.subject(key)})
	var m *message
	err := l.retry(ctx, func(ctx context.Context) error {
		resp, err := l.js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+l.Stream(), req)
		if err != nil {
			return err
		}
		m, err = decodeMsgGet(resp.Data)
		return err
	})
	if errors.Is(err, errNoMessage) {
		return nil, nil
	}
	return m, err
}

// Notify implements aegis.Notifier: the channel receives a value when
// key's grant is released or expires (a watch on the key: an ordered
// consumer, created before Notify returns). The channel is closed if the
// watch ends on its own (the connection closed). Stop the watch with the
// returned function. When ctx has no deadline the watch's creation waits
// at most Config.RequestTimeout.
func (l *Locker) Notify(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, nil, err
	}
	wctx, cancel := l.bound(ctx)
	defer cancel()
	w, err := l.kv.Watch(wctx, BucketKey(key), jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return nil, nil, l.fail("notify", key, err)
	}
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case e, ok := <-w.Updates():
				if !ok {
					close(ch)
					return
				}
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
		}
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = w.Stop()
			close(done)
			wg.Wait()
		})
	}
	return ch, stop, nil
}

// fail is the one place where the client's errors become this package's:
// a call the cluster did not answer names the servers (host:port only)
// and the connection's state.
func (l *Locker) fail(op, key string, err error) error {
	if noAnswer(err) || errors.Is(err, nats.ErrConnectionClosed) {
		nc := l.js.Conn()
		return fmt.Errorf("natslease: %s %q: no answer from NATS at %s (connection %s): %w", op, key, servers(nc), nc.Status(), err)
	}
	return fmt.Errorf("natslease: %s %q: %w", op, key, err)
}

// servers lists the connection's servers as host:port, without the user
// or password a URL may carry.
func servers(nc *nats.Conn) string {
	var out []string
	for _, s := range nc.Servers() {
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			out = append(out, u.Host)
		}
	}
	if len(out) == 0 {
		return "no server"
	}
	return strings.Join(out, ",")
}
