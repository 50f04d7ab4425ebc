package console

import (
	"context"
	"time"
)

// queueCards are the overview's cards of the queue.
type queueCards struct{}

func (s *Server) queueCards(ctx context.Context, now time.Time) (queueCards, error) {
	return queueCards{}, nil
}
