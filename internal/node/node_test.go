package node

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	require.NoError(t, Check("Config.Node", Default()))
	require.LessOrEqual(t, len(Default()), MaxLen)
	for _, tc := range []struct{ name, want string }{
		{"", "Config.Node is empty"},
		{strings.Repeat("n", MaxLen+1), `Config.Node "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"… is 101 bytes, at most 100 are allowed`},
		{"a\xffb", `Config.Node "a\xffb" is not valid UTF-8`},
		{"a\x00b", `Config.Node "a\x00b" contains a NUL byte`},
	} {
		err := Check("Config.Node", tc.name)
		require.ErrorIs(t, err, aegis.ErrInvalid, "%q", tc.name)
		require.EqualError(t, err, tc.want)
	}
}
