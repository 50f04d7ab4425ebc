package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aegislab/aegis/schedule"
)

// BenchmarkCatalogPropagation measures how long an edit takes to reach
// every replica's binder: from Put's return to the last of three replicas'
// EventBound for the new version (PostgreSQL: NOTIFY, with the poll as the
// fallback; SQLite: the 500 ms poll). The promise is under a second.
//
//	go test -run '^$' -bench CatalogPropagation -benchtime 20x ./schedule
func BenchmarkCatalogPropagation(b *testing.B) {
	for _, db := range []string{"postgres", "sqlite"} {
		b.Run(db, func(b *testing.B) {
			var open func() *replica
			if db == "postgres" {
				url := pgURL(b)
				open = func() *replica { return pgReplica(b, url) }
			} else {
				path := sqlitePath(b)
				open = func() *replica { return sqliteReplica(b, path) }
			}
			ctx := context.Background()
			var (
				mu    sync.Mutex
				bound = map[int64]map[string]time.Time{} // version → node → when bound
			)
			var admin *schedule.Catalog
			for i := range 3 {
				r := open()
				cat := openCatalog(b, r, nil)
				admin = cat
				node := fmt.Sprintf("node-%d", i)
				s, err := schedule.New(&schedule.Config{Node: node, Store: r.store, Catalog: cat, OnEvent: func(e schedule.Event) {
					if e.Kind != schedule.EventBound || e.Job != "edited" {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					if bound[int64(e.Token)] == nil {
						bound[int64(e.Token)] = map[string]time.Time{}
					}
					bound[int64(e.Token)][node] = time.Now()
				}})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Handle("noop", func(context.Context, json.RawMessage) error { return nil }); err != nil {
					b.Fatal(err)
				}
				if err := s.Start(ctx); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { stop(b, s) })
			}
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				e, err := admin.Put(ctx, schedule.Entry{Name: "edited", Cron: "0 0 3 * * *", Handler: "noop", Args: json.RawMessage(fmt.Sprint(i))})
				if err != nil {
					b.Fatal(err)
				}
				put := time.Now()
				deadline := put.Add(10 * time.Second)
				for {
					mu.Lock()
					got := bound[e.Version]
					n := len(got)
					var last time.Time
					for _, t := range got {
						if t.After(last) {
							last = t
						}
					}
					mu.Unlock()
					if n == 3 {
						lat = append(lat, max(last.Sub(put), 0))
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("version %d reached %d of 3 replicas within 10s", e.Version, n)
					}
					time.Sleep(time.Millisecond) // polling the recorded events, not synchronising the replicas
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		})
	}
}
