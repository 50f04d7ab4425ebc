package console

import (
	"context"
	"time"

	"github.com/aegislab/aegis/fence"
)

// fenceCards are the overview's cards of the fence.
type fenceCards struct {
	Resources int
}

func (s *Server) fenceCards(ctx context.Context, now time.Time) (fenceCards, error) {
	var d fenceCards
	ok, refusals, err := fence.Tables(ctx, s.st.db)
	if err != nil || !ok {
		return d, err
	}
	fs, err := s.st.fence(ctx, refusals)
	if err != nil {
		return d, err
	}
	d.Resources = len(fs)
	return d, nil
}
