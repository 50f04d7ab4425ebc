package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/schedule"
)

// The attempts list says what it shows and how many of how many.
func TestDescribe(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		q            attemptQuery
		shown, total int
		want         string
	}{
		{attemptQuery{}, 0, 0, "0 attempts of every schedule on record."},
		{attemptQuery{Show: "refused", Since: "24h"}, 1, 1, "1 attempt refused by the fence of every schedule in the last 24h."},
		{attemptQuery{Show: "lost", Job: "nightly", Since: "7d"}, 2, 2, "2 attempts lost (their lease lost) of nightly in the last 7 days."},
		{attemptQuery{Show: schedule.RanTwice}, 100, 340, "The newest 100 of 340 attempts of the ticks that ran twice of every schedule on record."},
		{attemptQuery{Show: "succeeded", Job: "every-2s", Since: "7d"}, 100, schedule.CountBound, "The newest 100 of 10000 or more attempts succeeded of every-2s in the last 7 days."},
	} {
		require.Equal(t, tt.want, tt.q.Describe(tt.shown, tt.total))
	}
}
