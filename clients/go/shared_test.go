package lockbroker_test

// Shared leases and semaphores against a real broker: readers beside readers,
// a writer kept out, permits up to the limit, and one limit per semaphore.

import (
	"errors"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestSharedLeasesHoldTogetherAndKeepAWriterOut(t *testing.T) {
	client, name := newClient(t), lockName(t)
	options := lockbroker.LockOptions{TTL: 5 * time.Second, Shared: true}
	options.Owner = "reader-1"
	first, err := client.Lock(bg, name, options)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(bg)
	options.Owner = "reader-2"
	second, err := client.Lock(bg, name, options)
	if err != nil {
		t.Fatalf("a second shared lease: %v", err)
	}
	defer second.Release(bg)
	if first.Mode != lockbroker.ModeShared || second.Fence <= first.Fence {
		t.Fatalf("shared leases: %v, %v", first, second)
	}

	_, err = client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second, Owner: "writer"})
	var busy *lockbroker.LockBusy
	if !errors.As(err, &busy) {
		t.Fatalf("a writer beside shared leases: %v", err)
	}
	if len(busy.Holders) != 2 || busy.Holders[0].Mode != lockbroker.ModeShared || busy.Limit != 0 {
		t.Fatalf("busy holders: %+v", busy.Holders)
	}

	status, err := client.Status(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	if status.Mode != lockbroker.ModeShared || status.HolderCount != 2 || len(status.Holders) != 2 ||
		status.Owner != "" {
		t.Fatalf("status while shared: %+v", status)
	}
	owners := map[string]int64{}
	for _, h := range status.Holders {
		owners[h.Owner] = h.Fence
	}
	if owners["reader-1"] != first.Fence || owners["reader-2"] != second.Fence {
		t.Fatalf("status holders: %+v", status.Holders)
	}
	if err := first.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := second.Release(bg); err != nil {
		t.Fatal(err)
	}
	writer, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second, Owner: "writer"})
	if err != nil {
		t.Fatalf("the writer once the readers left: %v", err)
	}
	if writer.Mode != lockbroker.ModeExclusive {
		t.Fatalf("writer mode %q", writer.Mode)
	}
	status, _ = client.Status(bg, name)
	if status.Mode != lockbroker.ModeExclusive || status.Owner != "writer" || status.HolderCount != 1 {
		t.Fatalf("status while exclusive: %+v", status)
	}
	_ = writer.Release(bg)
}

func TestSemaphoreGrantsPermitsUpToItsLimit(t *testing.T) {
	client, name := newClient(t), lockName(t)
	var permits []*lockbroker.Lease
	for i := 0; i < 2; i++ {
		permit, err := client.Semaphore(bg, name, 2, lockbroker.LockOptions{TTL: 5 * time.Second, Owner: "exporter"})
		if err != nil {
			t.Fatalf("permit %d: %v", i, err)
		}
		defer permit.Release(bg)
		if permit.Mode != lockbroker.ModePermit || permit.Limit != 2 {
			t.Fatalf("permit: %v limit %d", permit, permit.Limit)
		}
		permits = append(permits, permit)
	}
	_, err := client.AcquirePermit(bg, name, 2, lockbroker.AcquireOptions{TTL: time.Second})
	var busy *lockbroker.LockBusy
	if !errors.As(err, &busy) {
		t.Fatalf("a third permit of two: %v", err)
	}
	if busy.Limit != 2 || len(busy.Holders) != 2 || busy.Holders[0].Mode != lockbroker.ModePermit {
		t.Fatalf("busy: limit %d holders %+v", busy.Limit, busy.Holders)
	}
	status, err := client.SemaphoreStatus(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	if status.Limit != 2 || status.Held != 2 || status.Available != 0 || len(status.Holders) != 2 ||
		status.Fence != permits[1].Fence {
		t.Fatalf("semaphore status: %+v", status)
	}

	// A permit's token works on the semaphore's routes only.
	if err := permits[0].Extend(bg, 0); err != nil {
		t.Fatalf("extending a permit: %v", err)
	}
	var invalid *lockbroker.InvalidRequest
	if _, err := client.Extend(bg, name, permits[0].Token(), time.Second); !errors.As(err, &invalid) {
		t.Fatalf("a permit's token on the lock's route: %v", err)
	}
	if err := permits[0].Release(bg); err != nil {
		t.Fatal(err)
	}
	third, err := client.AcquirePermit(bg, name, 2, lockbroker.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatalf("a permit once one was released: %v", err)
	}
	if _, err := client.ReleasePermit(bg, name, third.Token()); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphoreAskedWithAnotherLimitIsALimitConflict(t *testing.T) {
	client, name := newClient(t), lockName(t)
	permit, err := client.AcquirePermit(bg, name, 3, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.AcquirePermit(bg, name, 5, lockbroker.AcquireOptions{TTL: time.Second, Wait: time.Second})
	var conflict *lockbroker.LimitConflict
	if !errors.As(err, &conflict) || conflict.Limit != 3 || conflict.Status != 409 {
		t.Fatalf("another limit: %v", err)
	}
	if _, err := client.ReleasePermit(bg, name, permit.Token()); err != nil {
		t.Fatal(err)
	}
	// Once no permit is held, the next acquire sets the limit.
	again, err := client.AcquirePermit(bg, name, 5, lockbroker.AcquireOptions{TTL: time.Second})
	if err != nil || again.Limit != 5 {
		t.Fatalf("a new limit once free: %v", err)
	}
	_ = again.Release(bg)
}
