package outcome

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/errtext"
)

// The real writes are tested against real servers by the failpoint tables
// of the queue and the scheduler; these are the rules of Do alone.

type sqlState string

func (s sqlState) Error() string    { return "server says " + string(s) }
func (s sqlState) SQLState() string { return string(s) }

type broken struct{ safe bool }

func (b broken) Error() string     { return "connection broken" }
func (b broken) SafeToRetry() bool { return b.safe }

var errRefused = errors.New("refused: the token moved on")

// script is a Write whose tries return errs in turn (nil after them),
// recording the texts sent.
func script(text string, errs ...error) (*Write, *[]string) {
	var sent []string
	w := &Write{
		Text:     text,
		Deadline: time.Now().Add(time.Minute),
		Try: func(_ context.Context, text string) error {
			sent = append(sent, text)
			if len(sent) <= len(errs) {
				return errs[len(sent)-1]
			}
			return nil
		},
		Refused: func(err error) bool { return errors.Is(err, errRefused) },
		Log:     func(string, ...any) {},
	}
	return w, &sent
}

func TestDo(t *testing.T) {
	t.Run("the text is made storable", func(t *testing.T) {
		w, sent := script("a\x00b")
		res := w.Do()
		require.NoError(t, res.Err)
		require.Equal(t, []string{`a\x00b`}, *sent)
	})
	t.Run("a data error: sent again at once as ASCII, without a note", func(t *testing.T) {
		w, sent := script("café", sqlState("22021"))
		res := w.Do()
		require.NoError(t, res.Err)
		require.Len(t, *sent, 2)
		require.Equal(t, errtext.ASCII("café", sqlState("22021")), (*sent)[1])
		require.Equal(t, 2, res.Tries+1, "the refused send is no try of its own")
	})
	t.Run("a data error without a text is retried like any failure", func(t *testing.T) {
		w, sent := script("", sqlState("22003"))
		require.NoError(t, w.Do().Err)
		require.Equal(t, []string{"", ""}, *sent)
	})
	t.Run("a failure: retried, the later text noting it", func(t *testing.T) {
		w, sent := script("boom", broken{safe: true})
		res := w.Do()
		require.NoError(t, res.Err)
		require.Equal(t, 2, res.Tries)
		require.Equal(t, "boom [recorded on try 2; try 1 failed: connection broken]", (*sent)[1])
	})
	t.Run("a refusal after a lost reply: read back", func(t *testing.T) {
		w, sent := script("boom", broken{safe: false}, errRefused)
		var asked []string
		w.Landed = func(_ context.Context, texts []string) (bool, error) { asked = texts; return true, nil }
		res := w.Do()
		require.NoError(t, res.Err, "the first try had landed")
		require.Equal(t, *sent, asked, "every text a try sent")
	})
	t.Run("a refusal after a lost reply that had not landed", func(t *testing.T) {
		w, _ := script("boom", broken{safe: false}, errRefused)
		w.Landed = func(context.Context, []string) (bool, error) { return false, nil }
		require.ErrorIs(t, w.Do().Err, errRefused)
	})
	t.Run("a refusal after a safe failure is not read back", func(t *testing.T) {
		w, _ := script("boom", broken{safe: true}, errRefused)
		w.Landed = func(context.Context, []string) (bool, error) { panic("nothing may have landed") }
		require.ErrorIs(t, w.Do().Err, errRefused)
	})
	t.Run("a server's answer is no lost reply", func(t *testing.T) {
		w, _ := script("", sqlState("40001"), errRefused)
		w.Landed = func(context.Context, []string) (bool, error) { panic("the server answered") }
		require.ErrorIs(t, w.Do().Err, errRefused)
	})
	t.Run("the deadline ends the retries, not the first try", func(t *testing.T) {
		w, sent := script("boom", broken{}, broken{}, broken{})
		w.Deadline = time.Now().Add(-time.Second)
		res := w.Do()
		require.Error(t, res.Err)
		require.Contains(t, res.Err.Error(), "tried 1 times")
		require.Len(t, *sent, 1)
	})
	t.Run("Stop ends the retries", func(t *testing.T) {
		w, sent := script("boom", broken{}, broken{})
		w.Stop = func() bool { return true }
		require.Error(t, w.Do().Err)
		require.Len(t, *sent, 1)
	})
	t.Run("a note on a text refused for its data stays ASCII", func(t *testing.T) {
		w, sent := script("café", sqlState("22021"), broken{safe: true})
		require.NoError(t, w.Do().Err)
		last := (*sent)[len(*sent)-1]
		for _, r := range last {
			require.Less(t, r, rune(128), "ASCII: %q", last)
		}
		require.True(t, strings.HasSuffix(last, `try 1 failed: "connection broken"]`), last)
	})
}

func TestMaybeLanded(t *testing.T) {
	require.False(t, MaybeLanded(nil))
	require.False(t, MaybeLanded(broken{safe: true}))
	require.True(t, MaybeLanded(broken{safe: false}))
	require.True(t, MaybeLanded(context.DeadlineExceeded))
	require.False(t, MaybeLanded(sqlState("23505")), "the server answered")
}
