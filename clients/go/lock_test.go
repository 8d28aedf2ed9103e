package lockbroker_test

// Lock: the managed lease, its renewer and its Context, against a real broker.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestLockHoldsTheLockUntilReleased(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: 5 * time.Second, Owner: "report-job"})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence <= 0 || len(lease.Token()) < 16 || lease.Owner != "report-job" {
		t.Fatalf("unexpected lease %v", lease)
	}
	status, err := client.Status(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	if !status.Held || status.Owner != "report-job" || status.Fence != lease.Fence {
		t.Fatalf("status while held: %+v", status)
	}
	if lease.Err() != nil || lease.Context().Err() != nil {
		t.Fatalf("a held lease reports %v / %v", lease.Err(), lease.Context().Err())
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	if lease.Context().Err() == nil || !errors.Is(lease.Err(), lockbroker.ErrReleased) {
		t.Fatalf("after release: context %v, err %v", lease.Context().Err(), lease.Err())
	}
	if status, _ := client.Status(bg, name); status.Held {
		t.Fatal("the lock is still held after release")
	}
	if err := lease.Release(bg); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	if err := lease.Extend(bg, 0); !errors.Is(err, lockbroker.ErrReleased) {
		t.Fatalf("Extend after Release: %v", err)
	}
}

func TestLeaseStringLeavesTheTokenOut(t *testing.T) {
	lease, err := newClient(t).Lock(bg, lockName(t), lockbroker.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(bg)
	text := lease.String()
	if strings.Contains(text, lease.Token()) || !strings.Contains(text, "held") {
		t.Fatalf("String() = %q", text)
	}
	for _, shown := range []string{fmt.Sprintf("%v", lease), fmt.Sprintf("%+v", lease), fmt.Sprintf("%#v", lease)} {
		if strings.Contains(shown, lease.Token()) {
			t.Fatalf("a fmt verb shows the token: %q", shown)
		}
	}
}

func TestFencesGrowFromOneLeaseToTheNext(t *testing.T) {
	client, name := newClient(t), lockName(t)
	var last int64
	for i := 0; i < 3; i++ {
		lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if lease.Fence <= last {
			t.Fatalf("fence %d after %d", lease.Fence, last)
		}
		last = lease.Fence
		if err := lease.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRenewalKeepsTheLeaseOverSeveralTTLs(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: 1200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3600 * time.Millisecond) // three TTLs
	if lease.Err() != nil || lease.Context().Err() != nil {
		t.Fatalf("the lease was lost while renewed: %v", lease.Err())
	}
	if lease.Remaining() < 300*time.Millisecond {
		t.Fatalf("remaining %s right after renewals", lease.Remaining())
	}
	status, _ := client.Status(bg, name)
	if !status.Held || status.Fence != lease.Fence {
		t.Fatalf("status %+v, fence %d", status, lease.Fence)
	}
	var busy *lockbroker.LockBusy
	if _, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second}); !errors.As(err, &busy) {
		t.Fatalf("a second acquire got %v", err)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
}

func TestForceReleaseCancelsTheContextWithinOneRenewalPeriod(t *testing.T) {
	client, name := newClient(t), lockName(t)
	ttl := 3 * time.Second
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	forceRelease(t, shared, name)
	forced := time.Now()
	select {
	case <-lease.Context().Done():
	case <-time.After(ttl/3 + 500*time.Millisecond):
		t.Fatal("the context was not cancelled within one renewal period")
	}
	var lost *lockbroker.LeaseLost
	if !errors.As(lease.Err(), &lost) || lost.Reason != "lease_lost" {
		t.Fatalf("Err() = %v", lease.Err())
	}
	if took := time.Since(forced); took > ttl/3+500*time.Millisecond {
		t.Fatalf("noticed after %s", took)
	}
	if err := lease.Extend(bg, 0); !errors.Is(err, lockbroker.ErrLeaseLost) {
		t.Fatalf("Extend of a lost lease: %v", err)
	}
	if err := lease.Release(bg); !errors.Is(err, lockbroker.ErrLeaseLost) {
		t.Fatalf("Release of a lost lease: %v", err)
	}
}

func TestAnUnreachableBrokerEndsTheLeaseBeforeTheBrokersExpiry(t *testing.T) {
	b := ownBroker(t, nil, nil)
	client, name := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 300 * time.Millisecond}), lockName(t)
	ttl := 1500 * time.Millisecond
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	b.Pause()
	paused := time.Now()
	select {
	case <-lease.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the context outlived the lease")
	}
	// Done by the broker's expiry (same machine, same clock), give or take
	// the timer's scheduling.
	if late := time.Now().UnixMilli() - lease.ExpiresAtMs(); late > 50 {
		t.Fatalf("the context was done %d ms after the broker's expiry", late)
	}
	if took := time.Since(paused); took > ttl+100*time.Millisecond {
		t.Fatalf("the lease ended %s after the pause, later than its TTL", took)
	}
	var lost *lockbroker.LeaseLost
	if !errors.As(lease.Err(), &lost) || lost.Reason != "expired" {
		t.Fatalf("Err() = %v", lease.Err())
	}
	// A lost lease is never renewed: this fails at once, without the broker.
	started := time.Now()
	if err := lease.Extend(bg, 0); !errors.Is(err, lockbroker.ErrLeaseLost) || time.Since(started) > 100*time.Millisecond {
		t.Fatalf("Extend of an expired lease: %v after %s", err, time.Since(started))
	}
	time.Sleep(300 * time.Millisecond) // past the broker's own expiry
	b.Resume()
	status, err := client.Status(bg, name)
	if err != nil || status.Held {
		t.Fatalf("status after expiry: %+v, %v", status, err)
	}
	if err := lease.Release(bg); !errors.Is(err, lockbroker.ErrLeaseLost) {
		t.Fatalf("Release after expiry: %v", err)
	}
}

func TestMaxHoldStopsRenewingAndTheLeaseRunsOut(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: time.Second, MaxHold: 1600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	select {
	case <-lease.Context().Done():
	case <-time.After(4 * time.Second):
		t.Fatal("the lease outlived MaxHold")
	}
	if held := time.Since(granted); held < 1200*time.Millisecond || held > 2200*time.Millisecond {
		t.Fatalf("held for %s with MaxHold 1.6s", held)
	}
	var lost *lockbroker.LeaseLost
	if !errors.As(lease.Err(), &lost) || lost.Reason != "expired" {
		t.Fatalf("Err() = %v", lease.Err())
	}
	time.Sleep(300 * time.Millisecond) // the local deadline comes first
	if status, _ := client.Status(bg, name); status.Held {
		t.Fatal("the broker still holds the lease after MaxHold")
	}
}

func TestTheBrokersMaxHoldEndsTheLease(t *testing.T) {
	b := ownBroker(t, nil, map[string]string{"LOCKBROKER_LOCKS_MAX_HOLD_MS": "1500"})
	client, name := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second}), lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	var refused *lockbroker.MaxHoldExceeded
	if err := lease.Extend(bg, time.Second); !errors.As(err, &refused) {
		t.Fatalf("Extend past max hold: %v", err)
	}
	if refused.Status != 409 || refused.ExpiresIn <= 0 || refused.ExpiresIn > time.Second {
		t.Fatalf("refusal %+v", refused)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}

	managed, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-managed.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the lease outlived the broker's max hold")
	}
	if !errors.Is(managed.Err(), lockbroker.ErrLeaseLost) {
		t.Fatalf("Err() = %v", managed.Err())
	}
}

func TestAWaitLongerThanTheTTLGivesAFreshLease(t *testing.T) {
	client, name := newClient(t), lockName(t)
	holder, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(2500 * time.Millisecond)
		_, _ = client.Release(bg, name, holder.Token())
	}()
	ttl := 900 * time.Millisecond
	started := time.Now()
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: ttl, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(bg)
	if waited := time.Since(started); waited < 2*time.Second {
		t.Fatalf("granted after %s, before the holder released", waited)
	}
	if lease.Err() != nil || lease.Remaining() < ttl/2 {
		t.Fatalf("a fresh lease after a long wait: err %v, remaining %s", lease.Err(), lease.Remaining())
	}
	time.Sleep(2 * ttl)
	if lease.Err() != nil || lease.Context().Err() != nil {
		t.Fatalf("the lease was lost after the wait: %v", lease.Err())
	}
	if status, _ := client.Status(bg, name); !status.Held || status.Fence != lease.Fence {
		t.Fatalf("status %+v", status)
	}
}

func TestAWaitedAcquireIsBoundedFromAfterTheGrant(t *testing.T) {
	client, name := newClient(t), lockName(t)
	holder, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		_ = holder.Release(bg)
	}()
	ttl := time.Second
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: ttl, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Counted from the waiting request's send time this would be long past.
	if left := lease.Remaining(); left < ttl/2 || left > ttl {
		t.Fatalf("remaining %s of a %s lease granted after a 1.5 s wait", left, ttl)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// recorder is an http.RoundTripper that notes when each request started, and
// hands each JSON answer to rewrite, when set, before the client reads it.
type recorder struct {
	mu      sync.Mutex
	paths   []string
	times   []time.Time
	rewrite func(path string, body map[string]any)
}

func (r *recorder) RoundTrip(request *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.paths = append(r.paths, request.URL.Path)
	r.times = append(r.times, time.Now())
	r.mu.Unlock()
	response, err := http.DefaultTransport.RoundTrip(request)
	if err != nil || r.rewrite == nil {
		return response, err
	}
	defer response.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(response.Body).Decode(&body); err != nil {
		return nil, err
	}
	r.rewrite(request.URL.Path, body)
	text, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	response.Body = io.NopCloser(bytes.NewReader(text))
	response.ContentLength = int64(len(text))
	response.Header.Del("Content-Length")
	return response, nil
}

func (r *recorder) extendsAfter(at time.Time) (count, after int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, path := range r.paths {
		if strings.HasSuffix(path, "/extend") {
			count++
			if r.times[i].After(at) {
				after++
			}
		}
	}
	return count, after
}

func TestNoRenewalIsSentAfterRelease(t *testing.T) {
	rec := &recorder{}
	client := clientOf(t, shared.URL, lockbroker.ClientOptions{HTTPClient: &http.Client{Transport: rec}})
	lease, err := client.Lock(bg, lockName(t), lockbroker.LockOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(450 * time.Millisecond) // about four renewals
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	time.Sleep(400 * time.Millisecond)
	count, after := rec.extendsAfter(released)
	if count < 2 || after != 0 {
		t.Fatalf("%d extends in all, %d after the release", count, after)
	}
}

func TestReleaseAcknowledgedIsNilWithoutReplicaAcknowledgement(t *testing.T) {
	lease, err := newClient(t).Lock(bg, lockName(t), lockbroker.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if acked := lease.ReleaseAcknowledged(); acked != nil {
		t.Fatalf("before the release: %v", *acked)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	if acked := lease.ReleaseAcknowledged(); acked != nil {
		t.Fatalf("a broker without replica acknowledgement answered acknowledged %v", *acked)
	}
}

func TestReleaseAcknowledgedSaysWhetherAReplicaAcknowledged(t *testing.T) {
	primary := ownRedis(t)
	replica := ownReplica(t, primary)
	broker := ownBroker(t, primary, map[string]string{"LOCKBROKER_REDIS_MIN_REPLICAS_ACKED": "1"})
	client := clientOf(t, broker.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second})
	name := lockName(t)
	first, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(bg); err != nil {
		t.Fatal(err)
	}
	if acked := first.ReleaseAcknowledged(); acked == nil || !*acked {
		t.Fatalf("with the replica up: acknowledged %v, want true", describeAcked(acked))
	}
	second, err := client.Acquire(bg, name+"-2", lockbroker.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		replica.Pause()
		defer replica.Resume()
		err = second.Release(bg)
	}()
	if err != nil {
		t.Fatal(err)
	}
	if acked := second.ReleaseAcknowledged(); acked == nil || *acked {
		t.Fatalf("with the replica paused: acknowledged %v, want false", describeAcked(acked))
	}
	if status, err := client.Status(bg, second.Name); err != nil || status.Held {
		t.Fatalf("the lock should be free on the primary: %+v, %v", status, err)
	}
}

func describeAcked(acked *bool) string {
	if acked == nil {
		return "absent"
	}
	return fmt.Sprint(*acked)
}

func TestLockOptionsAreChecked(t *testing.T) {
	client := newClient(t)
	if _, err := client.Lock(bg, "x", lockbroker.LockOptions{TTL: 10 * time.Second, MaxHold: 5 * time.Second}); err == nil {
		t.Fatal("MaxHold shorter than the TTL was accepted")
	}
	if _, err := client.Lock(bg, "x", lockbroker.LockOptions{TTL: -time.Second}); err == nil {
		t.Fatal("a negative TTL was accepted")
	}
	if _, err := client.Acquire(bg, "", lockbroker.AcquireOptions{}); err == nil {
		t.Fatal("an empty name was accepted")
	}
}

func TestCancellingTheParentContextDoesNotDropTheLease(t *testing.T) {
	client, name := newClient(t), lockName(t)
	parent, cancel := contextWithCancel()
	lease, err := client.Lock(parent, name, lockbroker.LockOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-lease.Context().Done() // the work started with it stops
	time.Sleep(time.Second)  // the renewer goes on until Release
	if lease.Err() != nil {
		t.Fatalf("Err() = %v", lease.Err())
	}
	if status, _ := client.Status(bg, name); !status.Held {
		t.Fatal("the lease was not renewed after the parent context ended")
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
}
