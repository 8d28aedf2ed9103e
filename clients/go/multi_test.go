package lockbroker_test

// Several locks at once, against a real broker: AcquireAll takes every lock or
// none and names the busy one, waits until the holder releases, and gives
// back an answer it cannot return; ReleaseAll ends each lease as its own
// Release would; LockAll renews every lease, ends the set's Context when one
// is lost, and Release gives them all back with one release-all.

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

const multiTTL = 10 * time.Second

func exclusive(names ...string) []lockbroker.LockAsk {
	asks := make([]lockbroker.LockAsk, len(names))
	for i, name := range names {
		asks[i] = lockbroker.LockAsk{Name: name}
	}
	return asks
}

func held(t *testing.T, client *lockbroker.Client, name string) bool {
	t.Helper()
	status, err := client.Status(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	return status.Held
}

func TestAcquireAllTakesEveryLockOrNoneAndBusyNamesTheLock(t *testing.T) {
	client, name := newClient(t), lockName(t)
	a, b, c := name+":a", name+":b", name+":c"
	holder, err := client.Acquire(bg, b, lockbroker.AcquireOptions{TTL: multiTTL, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}

	_, err = client.AcquireAll(bg, exclusive(c, b, a), lockbroker.AcquireOptions{TTL: multiTTL, Owner: "mover"})
	var busy *lockbroker.LockBusy
	if !errors.As(err, &busy) || busy.Lock != b || busy.Owner != "holder" || busy.Fence != holder.Fence {
		t.Fatalf("busy naming %q: %#v", b, err)
	}
	if held(t, client, a) || held(t, client, c) {
		t.Fatal("a lock other than the busy one was left held")
	}

	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	asks := []lockbroker.LockAsk{{Name: c}, {Name: b}, {Name: a, Shared: true}}
	leases, err := client.AcquireAll(bg, asks, lockbroker.AcquireOptions{TTL: multiTTL, Owner: "mover"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, lease := range leases {
		got = append(got, lease.Name+"/"+lease.Mode)
		status, err := client.Status(bg, lease.Name)
		if err != nil || !status.Held || status.Fence != lease.Fence || lease.Owner != "mover" {
			t.Fatalf("%v: status %+v, %v", lease, status, err)
		}
	}
	if want := c + "/exclusive " + b + "/exclusive " + a + "/shared"; strings.Join(got, " ") != want {
		t.Fatalf("leases %v, want %s", got, want)
	}
	if leases[1].Fence <= holder.Fence || leases[0].Token() == leases[1].Token() {
		t.Fatalf("not fresh leases: %v", leases)
	}
	// Each is an ordinary lease: extended and released on its own.
	if err := leases[0].Extend(bg, 2*multiTTL); err != nil {
		t.Fatal(err)
	}
	if err := leases[0].Release(bg); err != nil {
		t.Fatal(err)
	}
	if held(t, client, c) || !held(t, client, b) {
		t.Fatal("releasing one lease released another")
	}
	if _, err := client.ReleaseAll(bg, leases[1:]); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireAllRefusesANameGivenTwiceWithoutAsking(t *testing.T) {
	client, name := newClient(t), lockName(t)
	twice := []lockbroker.LockAsk{{Name: name, Shared: true}, {Name: name}}
	_, err := client.AcquireAll(bg, twice, lockbroker.AcquireOptions{TTL: multiTTL})
	if err == nil || !strings.Contains(err.Error(), "named twice (locks[1])") {
		t.Fatalf("a name given twice: %v", err)
	}
	if held(t, client, name) {
		t.Fatal("the lock was taken")
	}
	if leases, err := client.AcquireAll(bg, nil, lockbroker.AcquireOptions{}); err != nil || len(leases) != 0 {
		t.Fatalf("no locks: %v, %v", leases, err)
	}
	if results, err := client.ReleaseAll(bg, nil); err != nil || len(results) != 0 {
		t.Fatalf("no leases: %v, %v", results, err)
	}
}

func TestAcquireAllWaitsUntilTheHolderReleases(t *testing.T) {
	client, name := newClient(t), lockName(t)
	p, q := name+":p", name+":q"
	holder, err := client.Acquire(bg, q, lockbroker.AcquireOptions{TTL: multiTTL, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	time.AfterFunc(700*time.Millisecond, func() { released <- holder.Release(bg) })

	started := time.Now()
	leases, err := client.AcquireAll(bg, exclusive(p, q),
		lockbroker.AcquireOptions{TTL: multiTTL, Wait: 5 * time.Second, Owner: "mover"})
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(started); elapsed < 650*time.Millisecond || elapsed > 4*time.Second {
		t.Fatalf("granted after %v", elapsed)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if leases[1].Fence <= holder.Fence || !held(t, client, p) || !held(t, client, q) {
		t.Fatalf("after the wait: %v", leases)
	}
	if _, err := client.ReleaseAll(bg, leases); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireAllWaitThatRunsOutIsBusyAndTakesNothing(t *testing.T) {
	client, name := newClient(t), lockName(t)
	a, b := name+":a", name+":b"
	holder, err := client.Acquire(bg, b, lockbroker.AcquireOptions{TTL: multiTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(bg)
	started := time.Now()
	_, err = client.AcquireAll(bg, exclusive(a, b), lockbroker.AcquireOptions{TTL: multiTTL, Wait: 400 * time.Millisecond})
	var busy *lockbroker.LockBusy
	if !errors.As(err, &busy) || busy.Lock != b || time.Since(started) < 400*time.Millisecond {
		t.Fatalf("after %v: %v", time.Since(started), err)
	}
	if held(t, client, a) {
		t.Fatal("the free lock was left held")
	}
}

func TestAcquireAllWithTheSameRequestIDGetsTheSameLeases(t *testing.T) {
	client, name := newClient(t), lockName(t)
	options := lockbroker.AcquireOptions{TTL: multiTTL, RequestID: "move-" + name}
	first, err := client.AcquireAll(bg, exclusive(name+":1", name+":2"), options)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.AcquireAll(bg, exclusive(name+":1", name+":2"), options)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Token() != again[i].Token() || first[i].Fence != again[i].Fence {
			t.Fatalf("lease %d: %v, then %v", i, first[i], again[i])
		}
	}
}

func TestReleaseAllEndsEachLeaseAsItsOwnReleaseWould(t *testing.T) {
	client, name := newClient(t), lockName(t)
	a, b, taken := name+":a", name+":b", name+":taken"
	leases, err := client.AcquireAll(bg, exclusive(a, b), lockbroker.AcquireOptions{TTL: multiTTL})
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := client.Lock(bg, taken, lockbroker.LockOptions{TTL: multiTTL})
	if err != nil {
		t.Fatal(err)
	}
	// Lost at the broker, which this client learns from ReleaseAll.
	forceRelease(t, shared, taken)
	leases = append(leases, renewed)

	results, err := client.ReleaseAll(bg, leases)
	if err != nil || len(results) != 3 {
		t.Fatalf("%v, %v", results, err)
	}
	for i, lease := range leases[:2] {
		if results[i].Err != nil || results[i].Name != lease.Name || results[i].Fence != lease.Fence {
			t.Fatalf("result %d: %+v", i, results[i])
		}
		if !errors.Is(lease.Err(), lockbroker.ErrReleased) || lease.Context().Err() == nil {
			t.Fatalf("%v: err %v", lease, lease.Err())
		}
		if err := lease.Release(bg); err != nil {
			t.Fatalf("Release after ReleaseAll: %v", err)
		}
		if held(t, client, lease.Name) {
			t.Fatalf("%s is still held", lease.Name)
		}
	}
	var lost *lockbroker.LeaseLost
	if !errors.As(results[2].Err, &lost) || lost.Reason != "lease_lost" {
		t.Fatalf("the force-released lease: %+v", results[2])
	}
	if !errors.Is(renewed.Err(), lockbroker.ErrLeaseLost) || renewed.Context().Err() == nil {
		t.Fatalf("the lost lease: %v", renewed.Err())
	}
	if err := renewed.Release(bg); !errors.Is(err, lockbroker.ErrLeaseLost) {
		t.Fatalf("Release after ReleaseAll of a lost lease: %v", err)
	}
}

func TestReleaseAllDoesNotAskAboutALeaseAlreadyLost(t *testing.T) {
	client, name := newClient(t), lockName(t)
	a, b := name+":a", name+":b"
	leases, err := client.AcquireAll(bg, exclusive(a, b), lockbroker.AcquireOptions{TTL: multiTTL})
	if err != nil {
		t.Fatal(err)
	}
	forceRelease(t, shared, a)
	if err := leases[0].Extend(bg, 0); !errors.Is(err, lockbroker.ErrLeaseLost) {
		t.Fatalf("extend of a force-released lease: %v", err)
	}
	results, err := client.ReleaseAll(bg, leases)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(results[0].Err, lockbroker.ErrLeaseLost) || results[1].Err != nil {
		t.Fatalf("results %+v", results)
	}
	if !errors.Is(leases[1].Err(), lockbroker.ErrReleased) || held(t, client, b) {
		t.Fatalf("the held lease: %v", leases[1].Err())
	}
}

// since is every path sent from the index from on, but the renewer's extends.
func (r *recorder) since(from int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var paths []string
	for _, path := range r.paths[from:] {
		if !strings.HasSuffix(path, "/extend") {
			paths = append(paths, path)
		}
	}
	return paths
}

func (r *recorder) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.paths)
}

func recordingClient(t *testing.T) (*lockbroker.Client, *recorder) {
	record := &recorder{}
	client := clientOf(t, shared.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second,
		HTTPClient: &http.Client{Transport: record}})
	return client, record
}

func TestLockAllRenewsEveryLeaseAndReleaseGivesThemBackInOneRequest(t *testing.T) {
	client, record := recordingClient(t)
	name := lockName(t)
	a, b := name+":a", name+":b"
	asks := []lockbroker.LockAsk{{Name: a}, {Name: b, Shared: true}}
	set, err := client.LockAll(bg, asks, lockbroker.LockOptions{TTL: 1200 * time.Millisecond, Owner: "mover"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3600 * time.Millisecond) // three TTLs
	if set.Err() != nil || set.Context().Err() != nil {
		t.Fatalf("the set was lost while renewed: %v", set.Err())
	}
	for i, lease := range set.Leases {
		status, err := client.Status(bg, lease.Name)
		if err != nil || !status.Held || status.Fence != lease.Fence || lease.Remaining() < 500*time.Millisecond {
			t.Fatalf("%v: status %+v, %v", lease, status, err)
		}
		if lease.Name != asks[i].Name || (lease.Mode == lockbroker.ModeShared) != asks[i].Shared {
			t.Fatalf("lease %d is %v, asked %+v", i, lease, asks[i])
		}
	}
	var busy *lockbroker.LockBusy
	if _, err := client.Acquire(bg, a, lockbroker.AcquireOptions{TTL: time.Second}); !errors.As(err, &busy) || busy.Owner != "mover" {
		t.Fatalf("another acquire got %v", err)
	}

	from := record.sent()
	if err := set.Release(bg); err != nil {
		t.Fatal(err)
	}
	if paths := record.since(from); strings.Join(paths, " ") != "/v1/locks/release-all" {
		t.Fatalf("leaving sent %v, want one release-all", paths)
	}
	if !errors.Is(set.Err(), lockbroker.ErrReleased) || set.Context().Err() == nil {
		t.Fatalf("after Release: %v, %v", set.Err(), set.Context().Err())
	}
	for _, lease := range set.Leases {
		if !errors.Is(lease.Err(), lockbroker.ErrReleased) || held(t, client, lease.Name) {
			t.Fatalf("%v not released", lease)
		}
	}
	if err := set.Release(bg); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
}

func TestLockAllEndsTheSetsContextWhenOneLeaseIsLost(t *testing.T) {
	client, name := newClient(t), lockName(t)
	a, b := name+":a", name+":b"
	set, err := client.LockAll(bg, exclusive(a, b), lockbroker.LockOptions{TTL: 1200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	forceRelease(t, shared, b)
	// The next renewal of b, within a third of the TTL, learns it.
	select {
	case <-set.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the set's Context was not done after a lease was lost")
	}
	var lost *lockbroker.LeaseLost
	if !errors.As(set.Err(), &lost) || lost.Reason != "lease_lost" || !strings.Contains(lost.Error(), b) {
		t.Fatalf("the set's Err is %v, want the loss of %q", set.Err(), b)
	}
	if set.Leases[0].Err() != nil || !errors.Is(set.Leases[1].Err(), lockbroker.ErrLeaseLost) {
		t.Fatalf("leases: %v, %v", set.Leases[0].Err(), set.Leases[1].Err())
	}
	if err := set.Release(bg); !errors.Is(err, lockbroker.ErrLeaseLost) || !strings.Contains(err.Error(), b) {
		t.Fatalf("Release returned %v, want the loss of %q", err, b)
	}
	if !errors.Is(set.Leases[0].Err(), lockbroker.ErrReleased) || held(t, client, a) {
		t.Fatalf("%v was not given back", set.Leases[0])
	}
	if !errors.As(set.Err(), &lost) {
		t.Fatalf("after Release the set's Err is %v, want the loss", set.Err())
	}
}

func TestLockAllRefusesWhatAcquireAllRefuses(t *testing.T) {
	client, name := newClient(t), lockName(t)
	a, b := name+":a", name+":b"
	holder, err := client.Acquire(bg, b, lockbroker.AcquireOptions{TTL: multiTTL})
	if err != nil {
		t.Fatal(err)
	}
	var busy *lockbroker.LockBusy
	if _, err := client.LockAll(bg, exclusive(a, b), lockbroker.LockOptions{TTL: multiTTL}); !errors.As(err, &busy) || busy.Lock != b {
		t.Fatalf("busy naming %q: %v", b, err)
	}
	if held(t, client, a) {
		t.Fatal("a busy LockAll kept a lock")
	}
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	for _, options := range []lockbroker.LockOptions{{Shared: true}, {Fair: true}, {TTL: multiTTL, MaxHold: time.Second}} {
		if _, err := client.LockAll(bg, exclusive(a), options); err == nil {
			t.Fatalf("LockAll took %+v", options)
		}
	}
	if held(t, client, a) {
		t.Fatal("a refused LockAll kept a lock")
	}
}

func TestAcquireAllGivesBackAnAnswerForOtherLocks(t *testing.T) {
	client, record := recordingClient(t)
	name := lockName(t)
	a, b := name+":a", name+":b"
	record.rewrite = func(path string, body map[string]any) {
		if leases, ok := body["leases"].([]any); ok && strings.HasSuffix(path, "/acquire-all") {
			leases[0], leases[1] = leases[1], leases[0]
		}
	}
	_, err := client.AcquireAll(bg, exclusive(a, b), lockbroker.AcquireOptions{TTL: multiTTL})
	var broken *lockbroker.BrokerError
	if !errors.As(err, &broken) || broken.Code != "bad_response" {
		t.Fatalf("got %v, want bad_response", err)
	}
	if held(t, client, a) || held(t, client, b) {
		t.Fatal("the leases of an answer for other locks were kept")
	}
}

func TestAcquireAllGivesBackTheRestOfAnAnswerWithALeaseWithoutItsToken(t *testing.T) {
	client, record := recordingClient(t)
	name := lockName(t)
	a, b := name+":a", name+":b"
	record.rewrite = func(path string, body map[string]any) {
		if leases, ok := body["leases"].([]any); ok && strings.HasSuffix(path, "/acquire-all") {
			delete(leases[1].(map[string]any), "token")
		}
	}
	_, err := client.AcquireAll(bg, exclusive(a, b), lockbroker.AcquireOptions{TTL: multiTTL})
	var broken *lockbroker.BrokerError
	if !errors.As(err, &broken) || broken.Code != "bad_response" {
		t.Fatalf("got %v, want bad_response", err)
	}
	if held(t, client, a) {
		t.Fatal("the lease with its token was kept: the one without stopped its release-all")
	}
}
