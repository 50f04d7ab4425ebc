package elect_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/elect"
	"github.com/aegislab/aegis/internal/testing/docsnippets"
	"github.com/aegislab/aegis/lease/pglease"
)

// One candidate elected on PostgreSQL, from an empty database, and an
// observer of the leader record. docs/schedule.md shows campaign's body.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, drop, err := docsnippets.Postgres(ctx) // a pool on a new, empty schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	fmt.Println(campaign(ctx, pool))
	// Output:
	// observed: web-1
	// web-1 leads with term token 1
	// <nil>
}

// campaign is docs/schedule.md's election, as printed there.
func campaign(ctx context.Context, pool *pgxpool.Pool) error {
	board, err := elect.NewSQLBoardFromPool(ctx, pool, nil) // the leader record Observe reads, pushed by NOTIFY; creates its table (SQLite: NewSQLBoard(ctx, db, nil))
	if err != nil {
		return err
	}
	locker, err := pglease.New(pool, nil) // any aegis.Locker elects
	if err != nil {
		return err
	}
	e, err := elect.New(locker, "scheduler", &elect.Config{Node: "web-1", Board: board})
	if err != nil {
		return err
	}
	lead, err := e.Campaign(ctx) // blocks until leader; verifies the grant still holds
	if err != nil {
		return err
	}
	defer lead.Resign(ctx)
	obsCtx, stop := context.WithCancel(ctx)
	defer stop()
	changes, err := e.Observe(obsCtx) // elect.Leader{Node, Token, Since}; zero = no leader; closed when obsCtx ends
	if err != nil {
		return err
	}
	fmt.Println("observed:", (<-changes).Node)
	return work(lead.Context(), lead.Token()) // cancelled when leadership is lost; fence writes with the term token
}

// work stands for the leader's work.
func work(ctx context.Context, token aegis.Token) error {
	fmt.Println("web-1 leads with term token", token)
	return ctx.Err()
}

// A successor: when the leader resigns, the next candidate's term token is
// greater, so the old leader's late writes can be fenced.
func ExampleLeadership_Resign() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, drop, err := docsnippets.Postgres(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	locker, err := pglease.New(pool, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	candidate := func(node string) *elect.Election {
		e, err := elect.New(locker, "scheduler", &elect.Config{Node: node, TTL: 5 * time.Second})
		if err != nil {
			panic(err)
		}
		return e
	}
	first, err := candidate("web-1").Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(first.Node(), "leads, term", first.Token())

	next := make(chan *elect.Leadership, 1)
	go func() {
		l, err := candidate("web-2").Campaign(ctx) // waits while web-1 leads
		if err != nil {
			fmt.Println(err)
		}
		next <- l
	}()
	if err := first.Resign(ctx); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case second := <-next:
		if second == nil {
			return
		}
		defer second.Resign(ctx)
		fmt.Println(second.Node(), "leads, term", second.Token())
		fmt.Println("greater term:", second.Token() > first.Token())
	case <-ctx.Done():
		fmt.Println("web-2 was not elected within 30s")
	}
	// Output:
	// web-1 leads, term 1
	// web-2 leads, term 2
	// greater term: true
}
