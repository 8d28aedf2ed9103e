package lockbroker_test

// These examples run as tests against the broker TestMain starts, found through
// LOCKBROKER_URL as in production.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"lockbroker.dev/lockbroker"
)

// Hold a lock while work runs, renewing it in the background; the work stops
// when the lease is lost.
func ExampleClient_Lock() {
	client, err := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := client.Lock(ctx, "example-nightly-report", lockbroker.LockOptions{
		TTL:     30 * time.Second,
		Wait:    10 * time.Second,
		MaxHold: 2 * time.Hour,
	})
	var busy *lockbroker.LockBusy
	if errors.As(err, &busy) {
		fmt.Println("held by", busy.Owner)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// Pass lease.Context() to the work and lease.Fence to what it writes to.
	work := func(ctx context.Context, fence int64) error {
		select {
		case <-ctx.Done():
			return ctx.Err() // the lease is gone: stop writing
		default:
			fmt.Println("writing with a fence:", fence > 0)
			return nil
		}
	}
	if err := work(lease.Context(), lease.Fence); err != nil {
		log.Print(err)
	}
	// Output: writing with a fence: true
}

// A second acquirer is told who holds the lock and when it may be free.
func ExampleLockBusy() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	first, err := client.Acquire(ctx, "example-busy", lockbroker.AcquireOptions{TTL: 10 * time.Second, Owner: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)

	_, err = client.Acquire(ctx, "example-busy", lockbroker.AcquireOptions{Owner: "worker-2"})
	var busy *lockbroker.LockBusy
	if errors.As(err, &busy) {
		fmt.Println("busy, held by", busy.Owner, "with the same fence:", busy.Fence == first.Fence)
	}
	// Output: busy, held by worker-1 with the same fence: true
}

// The single calls: acquire, extend, inspect and release by hand.
func ExampleClient_Acquire() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	lease, err := client.Acquire(ctx, "example-acquire", lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		log.Fatal(err)
	}
	status, _ := client.Status(ctx, "example-acquire")
	fmt.Println("held:", status.Held, "same fence:", status.Fence == lease.Fence)

	err = lease.Release(ctx)
	if errors.Is(err, lockbroker.ErrLeaseLost) {
		fmt.Println("lost before release: treat the work as possibly duplicated")
	}
	status, _ = client.Status(ctx, "example-acquire")
	fmt.Println("held:", status.Held)
	// Output:
	// held: true same fence: true
	// held: false
}

// A resource that keeps no fences asks the broker whether a writer's fence is
// still current before it acts.
func ExampleClient_CheckFence() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	lease, err := client.Acquire(ctx, "example-invoice-42", lockbroker.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	check, err := client.CheckFence(ctx, "example-invoice-42", lease.Fence)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("current while held:", check.Current, "for a while yet:", check.ExpiresIn > 0)

	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	check, _ = client.CheckFence(ctx, "example-invoice-42", lease.Fence)
	fmt.Println("current after release:", check.Current)
	// Output:
	// current while held: true for a while yet: true
	// current after release: false
}

// A session keeps many leases with one keepalive every TTL/3; closing it
// releases them all. If the session is lost, so is every lease under it.
func ExampleClient_OpenSession() {
	client, _ := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	ctx := context.Background()
	session, err := client.OpenSession(ctx, lockbroker.SessionOptions{TTL: 10 * time.Second, Owner: "batch-7"})
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)

	var accounts []*lockbroker.Lease
	for _, name := range []string{"example-account-17", "example-account-42"} {
		lease, err := session.Acquire(ctx, name, lockbroker.AcquireOptions{Wait: 5 * time.Second})
		if err != nil {
			log.Fatal(err) // a *SessionLost matches lockbroker.ErrSessionLost
		}
		accounts = append(accounts, lease)
	}
	// session.Context() is done the moment the session is lost (or closed).
	status, _ := session.Status(ctx)
	fmt.Println("open:", status.Open, "leases:", status.Leases, "owner:", accounts[0].Owner)

	if err := session.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", session.LeasesReleased(), errors.Is(accounts[1].Err(), lockbroker.ErrReleased))
	// Output:
	// open: true leases: 2 owner: batch-7
	// released: 2 true
}
