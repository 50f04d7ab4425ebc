package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/schedule"
)

// The orders service's tables. The fence is fence.CheckSQL on the
// resource "reconciliation": every write of the job carries its token, and
// the fence refuses a lower one than it accepted, in the same transaction.
const schemaSQL = `
CREATE TABLE orders (id int PRIMARY KEY, amount_cents bigint NOT NULL, reconciled boolean NOT NULL DEFAULT false);
CREATE TABLE ledger (id bigserial PRIMARY KEY, order_id int NOT NULL, token bigint NOT NULL, node text NOT NULL);
INSERT INTO orders (id, amount_cents) SELECT i, i * 1000 FROM generate_series(1, 10) AS i;`

const (
	applySQL   = `INSERT INTO ledger (order_id, token, node) VALUES ($1, $2, $3)`
	markSQL    = `UPDATE orders SET reconciled = true WHERE id = $1`
	pendingSQL = `SELECT id FROM orders WHERE NOT reconciled ORDER BY id`
)

// line is what a replica prints, one JSON object per line.
type line struct {
	Node    string `json:"node"`
	Kind    string `json:"kind"`
	Fire    string `json:"fire,omitempty"`
	Token   int64  `json:"token,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Order   int    `json:"order,omitempty"`
	Text    string `json:"text,omitempty"`
}

func say(l line) {
	b, _ := json.Marshal(l)
	fmt.Println(string(b))
}

// replicaMain is one replica process: a scheduler in run-key mode with the
// nightly reconciliation job. Its settings come from the environment the
// demo sets; the job's time of day comes on its standard input once it
// said it is ready.
func replicaMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	node := os.Getenv("NIGHTLY_REPLICA")
	url := os.Getenv("NIGHTLY_POSTGRES")
	fenced := os.Getenv("NIGHTLY_FENCE") != "false"
	work, _ := time.ParseDuration(os.Getenv("NIGHTLY_WORK"))
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		say(line{Node: node, Kind: "error", Text: err.Error()})
		return 1
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	// The demo migrated the fence's tables, as a deployment step would:
	// the fence records its refusals of this replica's transactions
	// through db.
	if err := fence.RecordRefusalsOn(ctx, db); err != nil {
		say(line{Node: node, Kind: "error", Text: err.Error()})
		return 1
	}
	store, err := schedule.NewStore(ctx, db, nil)
	if err != nil {
		say(line{Node: node, Kind: "error", Text: err.Error()})
		return 1
	}
	s, err := schedule.New(&schedule.Config{
		Node:         node,
		Store:        store,
		ReapInterval: 200 * time.Millisecond,
		OnEvent: func(e schedule.Event) {
			if e.Kind == schedule.EventMisfired {
				return
			}
			text := e.Reason
			if e.Err != nil {
				text += " " + e.Err.Error()
			}
			say(line{Node: node, Kind: string(e.Kind), Fire: e.Fire.UTC().Format("15:04:05"), Token: int64(e.Token), Attempt: e.Attempt, Text: text})
		},
	})
	if err != nil {
		say(line{Node: node, Kind: "error", Text: err.Error()})
		return 1
	}
	say(line{Node: node, Kind: "ready", Text: strconv.Itoa(os.Getpid())})
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		say(line{Node: node, Kind: "error", Text: "no time of day on standard input"})
		return 1
	}
	offset, err := time.ParseDuration(in.Text())
	if err != nil {
		say(line{Node: node, Kind: "error", Text: "the time of day: " + err.Error()})
		return 1
	}
	err = s.Add(schedule.Job{
		Name: "nightly-reconciliation",
		// Nightly, at the same time of day on every replica: a day-long
		// interval aligned to the epoch, offset to the demo's moment. In
		// production: Cron: "TZ=Europe/Berlin 0 0 2 * * *".
		Schedule:      schedule.Interval{Period: 24 * time.Hour, Offset: offset},
		LockAtMostFor: time.Second,
		Run: func(ctx context.Context) error {
			return reconcile(ctx, db, node, work, fenced)
		},
	})
	if err != nil {
		say(line{Node: node, Kind: "error", Text: err.Error()})
		return 1
	}
	if err := s.Start(ctx); err != nil {
		say(line{Node: node, Kind: "error", Text: err.Error()})
		return 1
	}
	<-ctx.Done()
	s.Stop()
	return 0
}

// reconcile is the nightly job: it reads the pending orders once, then
// applies each (work, then one fenced transaction).
func reconcile(ctx context.Context, db *sql.DB, node string, work time.Duration, fenced bool) error {
	token, _ := schedule.TokenFrom(ctx)
	rows, err := db.QueryContext(ctx, pendingSQL)
	if err != nil {
		return err
	}
	var pending []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		pending = append(pending, id)
	}
	rows.Close()
	say(line{Node: node, Kind: "pending", Token: int64(token), Text: fmt.Sprint(pending)})
	for _, id := range pending {
		time.Sleep(work) // reconciling one order; a paused process stops here
		err := apply(ctx, db, id, token, node, fenced)
		if se, ok := errors.AsType[*fence.StaleError](err); ok {
			say(line{Node: node, Kind: "stale", Order: id, Token: int64(token), Text: fmt.Sprint(se.Held)})
			if se.Recorded {
				say(line{Node: node, Kind: "recorded", Token: int64(token), Text: fmt.Sprintf("%s refused token %d, holding %d", se.Resource, se.Token, se.Held)})
			} else {
				say(line{Node: node, Kind: "recorded", Token: int64(token), Text: se.RecordErr.Error()})
			}
		}
		if err != nil {
			return err
		}
		say(line{Node: node, Kind: "applied", Order: id, Token: int64(token)})
	}
	return nil
}

// fenceResource is the resource the job's writes are fenced under: the
// console's Fence page shows it, and its refusals.
const fenceResource = "reconciliation"

// apply records one order in the ledger, fenced by token: the write runs
// whatever the job's context says (a resumed process does not look: its
// cancellation is dropped, its values, the run the fence names in its
// record of a refusal, kept), and the fence is what refuses it, with a
// *fence.StaleError that says which token it held and that it recorded the
// refusal.
func apply(ctx context.Context, db *sql.DB, id int, token aegis.Token, node string, fenced bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if fenced {
		if err := fence.CheckSQL(ctx, tx, fenceResource, token); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, applySQL, id, int64(token), node); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, markSQL, id); err != nil {
		return err
	}
	return tx.Commit()
}
