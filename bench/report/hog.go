package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// hog keeps every core busy for the loaded pass: one spinning goroutine
// per core, at normal priority, so that the servers and the clients both
// compete with it for CPU.
func hog(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hog", flag.ContinueOnError)
	d := fs.Duration("for", 30*time.Minute, "how long (it also ends on SIGINT or SIGTERM)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *d)
	defer cancel()
	fmt.Fprintf(os.Stderr, "hog: %d spinning goroutines for at most %s\n", runtime.NumCPU(), *d)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			x := uint64(1)
			for ctx.Err() == nil {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			sink.Add(x)
		})
	}
	wg.Wait()
	return nil
}

var sink atomic.Uint64
