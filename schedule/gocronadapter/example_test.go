package gocronadapter_test

import (
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/aegislab/aegis/lease/memlease"
	"github.com/aegislab/aegis/schedule/gocronadapter"
)

// A gocron scheduler whose jobs take a lease first: with pglease,
// sqlitelease or redislease instead of memlease, across replicas.
func ExampleNewLocker() {
	locker, err := gocronadapter.NewLocker(memlease.New(), &gocronadapter.LockerConfig{
		LockAtMostFor:  30 * time.Second,
		LockAtLeastFor: 5 * time.Second, // more than the replicas' clock difference
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(func() { fmt.Println("report sent"); close(done) }),
		gocron.WithName("daily-report")) // the lease key
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		fmt.Println("the job did not run within 30s")
	}
	_ = s.Shutdown()
	// Output: report sent
}
