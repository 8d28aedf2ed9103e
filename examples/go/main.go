// Command lock takes a lockbroker lock with the Go client (clients/go), prints
// the fence, shows what a second worker sees, and releases the lock. A lock
// already held makes it print "busy: ..." and exit 75 (EX_TEMPFAIL).
//
//	LOCKBROKER_URL=http://127.0.0.1:7700 [LOCKBROKER_API_KEY=...] go run . [NAME]
//
// The token is a secret: it stays in the lease and is never printed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"lockbroker.dev/lockbroker"
)

func run() (int, error) {
	name := "example-go"
	if len(os.Args) > 1 {
		name = os.Args[1]
	}
	client, err := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	if err != nil {
		return 64, err
	}
	ctx := context.Background()

	// Lock renews the lease every TTL/3 until Release.
	lease, err := client.Lock(ctx, name, lockbroker.LockOptions{TTL: 10 * time.Second, Owner: "go-example"})
	var busy *lockbroker.LockBusy
	if errors.As(err, &busy) {
		fmt.Printf("busy: %s is held by %s (fence %d); retry in %s\n", name, busy.Owner, busy.Fence, busy.RetryAfter)
		return 75, nil
	} else if err != nil {
		return 1, fmt.Errorf("lock: %w", err)
	}
	fmt.Printf("acquired %s with fence %d\n", name, lease.Fence)

	// Another worker asking now is told who holds the lock and when to retry.
	_, err = client.Acquire(ctx, name, lockbroker.AcquireOptions{TTL: 10 * time.Second, Wait: 200 * time.Millisecond, Owner: "second-worker"})
	if !errors.As(err, &busy) {
		return 1, fmt.Errorf("expected lock_busy for a second acquire, got %v", err)
	}
	fmt.Printf("second worker: busy, held by %s with fence %d, retry in %s\n", busy.Owner, busy.Fence, busy.RetryAfter)

	// The work: lease.Context() is done the moment the lease is lost.
	select {
	case <-lease.Context().Done():
		return 1, lease.Err()
	case <-time.After(100 * time.Millisecond):
	}

	if err := lease.Release(ctx); errors.Is(err, lockbroker.ErrLeaseLost) {
		return 1, errors.New("lease lost before release: treat the work as possibly duplicated")
	} else if err != nil {
		return 1, fmt.Errorf("release: %w", err)
	}
	fmt.Printf("released: fence %d\n", lease.Fence)
	return 0, nil
}

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	os.Exit(code)
}
