package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/lease/pglease"
)

// TestGrantedAsksAgainAfterAFailedRead: a node paused inside its read of
// the grant history wakes past the read's bound; the read is asked again
// and the grant is the store's time, not the call start (the mark test saw
// a paused pg-lease node's grant drawn 5ms early).
func TestGrantedAsksAgainAfterAFailedRead(t *testing.T) {
	store := time.Unix(100, 8e6)
	var out bytes.Buffer
	reads := 0
	n := &node{c: lab.NodeConfig{TTL: 2 * time.Second}, out: json.NewEncoder(&out)}
	n.grants = func(ctx context.Context, key string, limit int) ([]pglease.Grant, error) {
		reads++
		if reads == 1 {
			return nil, context.DeadlineExceeded
		}
		return []pglease.Grant{{Token: 2, Granted: time.Unix(99, 0)}, {Token: 1, Granted: store}}, nil
	}
	s := section{job: "j", tick: 3, token: aegis.Token(1), lease: aegis.Lease{Key: "k", Token: 1}}
	until := time.Unix(102, 3e6).UnixNano() // the call start + the TTL
	require.Equal(t, store.UnixNano(), n.granted(t.Context(), s, until))
	require.Equal(t, 2, reads)
	require.Empty(t, out.String(), "no error event: the second read answered")

	// Every read failing: the call start, and the error says why.
	reads = 0
	n.grants = func(context.Context, string, int) ([]pglease.Grant, error) {
		reads++
		return nil, errors.New("the store is down")
	}
	require.Equal(t, time.Unix(100, 3e6).UnixNano(), n.granted(t.Context(), s, until))
	require.Equal(t, 3, reads)
	require.Contains(t, out.String(), "grant history: the store is down")
}
