package natslease

import (
	"encoding/base64"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/driver"
)

// Answers of STREAM.MSG.GET as nats-server 2.15 writes them.
var msgGetSeeds = []string{
	`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"$KV.b.k","seq":7,"data":"` + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")) + `","time":"2026-12-07T15:00:00.123456789Z"}}`,
	`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"$KV.b.k","seq":8,"hdrs":"` + base64.StdEncoding.EncodeToString([]byte("NATS/1.0\r\nKV-Operation: DEL\r\n\r\n")) + `","time":"2026-12-07T15:00:00Z"}}`,
	`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"$KV.b.k","seq":9,"hdrs":"` + base64.StdEncoding.EncodeToString([]byte("NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 60s\r\n\r\n")) + `","time":"2026-12-07T15:00:00Z"}}`,
	`{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","error":{"code":404,"err_code":10037,"description":"no message found"}}`,
	`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`,
	`{"message":{"seq":0}}`, `{}`, `null`, `{"message":{"seq":1,"hdrs":"bm90IGhlYWRlcnM="}}`, `not json`,
}

func TestDecodeMsgGet(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	m, err := decodeMsgGet([]byte(msgGetSeeds[0]))
	require.NoError(t, err)
	require.EqualValues(t, 7, m.Seq)
	require.Empty(t, m.heldBy(id, 7), "a live value of the grant")
	require.Equal(t, reasonTaken, m.heldBy(id, 8), "a token after the message's revision")
	require.Equal(t, reasonTaken, m.heldBy(strings.Repeat("f", 32), 7), "another owner")

	m, err = decodeMsgGet([]byte(msgGetSeeds[1]))
	require.NoError(t, err)
	require.False(t, m.live())
	require.Equal(t, reasonGone, m.heldBy(id, 7))

	m, err = decodeMsgGet([]byte(msgGetSeeds[2]))
	require.NoError(t, err)
	require.Equal(t, reasonExpired, m.heldBy(id, 7))

	_, err = decodeMsgGet([]byte(msgGetSeeds[3]))
	require.ErrorIs(t, err, errNoMessage)
	_, err = decodeMsgGet([]byte(msgGetSeeds[4]))
	require.ErrorContains(t, err, "JetStream system temporarily unavailable (code 503, error code 10008)")
	for _, bad := range msgGetSeeds[5:8] {
		_, err = decodeMsgGet([]byte(bad))
		require.ErrorContains(t, err, "has no message", bad)
	}
	_, err = decodeMsgGet([]byte("not json"))
	require.ErrorContains(t, err, "is not JSON")
}

// FuzzDecodeMsgGet: whatever a server answers, decoding never panics, and
// a decoded message judges any owner without panicking.
func FuzzDecodeMsgGet(f *testing.F) {
	for _, s := range msgGetSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMsgGet(b)
		if err != nil {
			require.Nil(t, m)
			return
		}
		require.NotZero(t, m.Seq)
		_ = m.heldBy("0123456789abcdef0123456789abcdef", 1)
		_ = m.live()
	})
}

// FuzzOwner: a lease's Owner is accepted only in the form TryAcquire
// makes, with the lease's own token.
func FuzzOwner(f *testing.F) {
	for _, s := range []string{"0123456789abcdef0123456789abcdef:7", "0123456789abcdef0123456789abcdef:07", ":7", "0123456789ABCDEF0123456789ABCDEF:7", "x:y:z", "0123456789abcdef0123456789abcdef:0", "0123456789abcdef0123456789abcdef:18446744073709551616"} {
		f.Add(s, int64(7))
	}
	f.Fuzz(func(t *testing.T, o string, token int64) {
		id, ok := ownerID(&aegis.Lease{Key: "k", Owner: o, Token: aegis.Token(token)})
		if !ok {
			return
		}
		require.Len(t, id, 32)
		require.Equal(t, o, id+":"+strconv.FormatInt(token, 10), "the owner names the lease's token")
	})
}

// natsKey is what nats.go accepts as a key (jetstream's own check), and no
// empty "."-separated token.
var natsKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

// FuzzBucketKey: every valid lease key maps to a key NATS accepts, and
// different keys to different bucket keys.
func FuzzBucketKey(f *testing.F) {
	for _, s := range []string{"jobs/nightly", "invoice.2026", "a=2Eb", "a.b", "ü", "*", ">", "a b", "..", ".a.", strings.Repeat("x", driver.MaxKeyLen)} {
		f.Add(s, "a.b")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if driver.CheckKey(a) != nil || !utf8.ValidString(b) {
			return
		}
		ka := BucketKey(a)
		require.Regexp(t, natsKey, ka)
		require.False(t, strings.HasPrefix(ka, ".") || strings.HasSuffix(ka, ".") || strings.Contains(ka, ".."), ka)
		require.LessOrEqual(t, len(ka), 3*len(a))
		if a != b {
			require.NotEqual(t, ka, BucketKey(b), "%q and %q", a, b)
		}
	})
}
