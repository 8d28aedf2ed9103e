package lockbroker_test

// Examples of shared leases, semaphores, several locks at once, watching and
// leader election; they run as tests against the broker TestMain starts.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"lockbroker.dev/lockbroker"
)

// Readers share a lock; a semaphore lets a few exports run at once.
func ExampleClient_Semaphore() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	reader, err := client.Lock(ctx, "example-catalog", lockbroker.LockOptions{Shared: true, Wait: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Release(ctx)
	fmt.Println("reading as", reader.Mode)

	permit, err := client.Semaphore(ctx, "example-exports", 3, lockbroker.LockOptions{Wait: 10 * time.Second})
	var busy *lockbroker.LockBusy
	var conflict *lockbroker.LimitConflict
	switch {
	case errors.As(err, &busy): // every permit still taken after Wait
		fmt.Println(len(busy.Holders), "holders, limit", busy.Limit)
		return
	case errors.As(err, &conflict): // held under another limit: ask with it
		fmt.Println("the limit is", conflict.Limit)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer permit.Release(ctx)
	fmt.Println("exporting with permit", permit.Mode, "of", permit.Limit)
	// Output:
	// reading as shared
	// exporting with permit permit of 3
}

// Hold two accounts for a transfer, both renewed; the transfer stops as soon
// as either lease is lost.
func ExampleClient_LockAll() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	accounts := []lockbroker.LockAsk{{Name: "example-account:17"}, {Name: "example-account:42"}}
	leases, err := client.LockAll(ctx, accounts, lockbroker.LockOptions{TTL: 30 * time.Second, Wait: 10 * time.Second})
	var busy *lockbroker.LockBusy
	if errors.As(err, &busy) {
		fmt.Println(busy.Lock, "is held by", busy.Owner, "and nothing was taken")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	transfer := func(ctx context.Context, debit, credit *lockbroker.Lease) error {
		if err := ctx.Err(); err != nil {
			return err // a lease of the set is gone: stop
		}
		fmt.Println("transferring with fences:", debit.Fence > 0 && credit.Fence > 0)
		return nil
	}
	if err := transfer(leases.Context(), leases.Leases[0], leases.Leases[1]); err != nil {
		log.Print(err, ": ", leases.Err()) // Err names the lock that was lost
	}
	// One release-all gives both back; it reports a loss while held.
	if err := leases.Release(ctx); err != nil {
		log.Print(err)
	}
	// Output: transferring with fences: true
}

// Follow a lock's changes; the watch resumes by itself after a dropped stream.
func ExampleClient_Watch() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	events, err := client.Watch(ctx, "example-watched", lockbroker.WatchOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer events.Close() // from any goroutine: Next then returns ErrWatchClosed
	for i := 0; i < 3; i++ {
		event, err := events.Next()
		if err != nil {
			log.Fatal(err)
		}
		switch e := event.(type) {
		case *lockbroker.LockState: // first, and after Lagged
			fmt.Println("state: held", e.Held)
			// Something to watch: another worker takes the lock and gives it back.
			lease, err := client.Acquire(ctx, "example-watched", lockbroker.AcquireOptions{Owner: "worker-1"})
			if err == nil {
				_ = lease.Release(ctx)
			}
		case *lockbroker.LockEvent: // one per change
			fmt.Println(e.Type, "by", e.Owner)
		case *lockbroker.Lagged: // fell behind; a fresh state follows
			fmt.Println("missed", e.Missed)
		}
	}
	// Output:
	// state: held false
	// acquired by worker-1
	// released by worker-1
}

// Campaign for leadership; the term fences what the leader writes.
func ExampleClient_Leader() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	leader, err := client.Leader("example-scheduler", lockbroker.LeaderOptions{TTL: 10 * time.Second, Owner: "node-a"})
	if err != nil {
		log.Fatal(err)
	}
	if err := leader.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer leader.Stop(ctx)
	select {
	case <-leader.Elected():
	case <-time.After(10 * time.Second):
		owner, term := leader.Current()
		fmt.Println("following", owner, "term", term, "error", leader.Err())
		return
	}
	work := leader.Context() // done when the term ends
	fmt.Println("leading:", leader.IsLeader(), "term > 0:", leader.Term() > 0, "work runs:", work.Err() == nil)
	select {
	case <-leader.Lost():
		fmt.Println("lost leadership:", leader.LostReason())
	default:
	}
	// Output: leading: true term > 0: true work runs: true
}
