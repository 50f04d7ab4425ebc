package rowlease

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis"
)

func TestCheckHolder(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"web-1/4242", true},
		{"billing (o'brien)", true},
		{strings.Repeat("é", 127), true}, // 254 bytes
		{strings.Repeat("h", MaxHolderLen), true},
		{strings.Repeat("h", MaxHolderLen+1), false},
		{"web\n1", false},
		{"web\x00", false},
		{"web\x1b[31m", false},
		{"web\u0085", false}, // NEL, a C1 control
		{"web-\xff", false},
	} {
		err := CheckHolder("Config.Holder", c.name)
		if c.ok {
			require.NoError(t, err, "%q", c.name)
			continue
		}
		require.ErrorIs(t, err, aegis.ErrInvalid, "%q", c.name)
		require.ErrorContains(t, err, "Config.Holder")
	}
}

func TestCheckHistory(t *testing.T) {
	for _, n := range []int{0, 1, MaxHistory} {
		require.NoError(t, CheckHistory("Config.History", n))
	}
	for _, n := range []int{-1, MaxHistory + 1} {
		err := CheckHistory("Config.History", n)
		require.ErrorIs(t, err, aegis.ErrInvalid)
		require.ErrorContains(t, err, "Config.History")
	}
}

// The default holder passes the check whatever the host's name.
func TestDefaultHolderAlwaysValid(t *testing.T) {
	require.NoError(t, CheckHolder("h", DefaultHolder()))
	for _, host := range []string{"db-1.example", strings.Repeat("a", 253), "bad\nhost", "bad\xffhost", strings.Repeat("é", 200)} {
		h := defaultHolder(host, 4194304)
		require.NoError(t, CheckHolder("h", h), "%q", host)
		require.True(t, strings.HasSuffix(h, "/4194304"), h)
	}
	require.Equal(t, "bad?host/7", defaultHolder("bad\nhost", 7))
}
