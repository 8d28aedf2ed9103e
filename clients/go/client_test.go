package lockbroker_test

// The single calls and their errors, against a real broker.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

func TestASecondAcquirerGetsLockBusyWithTheHolder(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Owner: "first"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(bg)
	_, err = client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Owner: "second"})
	var busy *lockbroker.LockBusy
	if !errors.As(err, &busy) {
		t.Fatalf("got %v", err)
	}
	if busy.Status != 423 || busy.Code != "lock_busy" || busy.Owner != "first" || busy.Fence != lease.Fence {
		t.Fatalf("busy %+v", busy)
	}
	if busy.AvailableIn <= 0 || busy.AvailableIn > 5*time.Second || busy.ExpiresIn <= 0 || busy.RetryAfter < time.Second {
		t.Fatalf("busy timings %+v", busy)
	}
	var common *lockbroker.BrokerError
	if !errors.As(err, &common) || common.Code != "lock_busy" {
		t.Fatalf("LockBusy does not unwrap to BrokerError: %v", err)
	}
}

func TestWaitGetsTheLockOnceTheHolderReleases(t *testing.T) {
	client, name := newClient(t), lockName(t)
	first, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = first.Release(bg)
	}()
	started := time.Now()
	second, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(started); waited < 300*time.Millisecond || waited > 4*time.Second {
		t.Fatalf("waited %s", waited)
	}
	if second.Fence <= first.Fence {
		t.Fatalf("fence %d after %d", second.Fence, first.Fence)
	}
	_ = second.Release(bg)
}

func TestWaitGivesUpWithLockBusyAtItsDeadline(t *testing.T) {
	client, name := newClient(t), lockName(t)
	holder, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(bg)
	started := time.Now()
	_, err = client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Wait: 600 * time.Millisecond})
	var busy *lockbroker.LockBusy
	if !errors.As(err, &busy) {
		t.Fatalf("got %v", err)
	}
	if waited := time.Since(started); waited < 500*time.Millisecond || waited > 3*time.Second {
		t.Fatalf("gave up after %s", waited)
	}
}

func TestExtendReplacesTheRemainingTTL(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	renewal, err := client.Extend(bg, name, lease.Token(), 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if renewal.Fence != lease.Fence || renewal.TTL != 4*time.Second || renewal.ExpiresAtMs <= 0 {
		t.Fatalf("renewal %+v", renewal)
	}
	if status, _ := client.Status(bg, name); status.ExpiresIn < 2*time.Second {
		t.Fatalf("status after extend %+v", status)
	}
	fence, err := client.Release(bg, name, lease.Token())
	if err != nil || fence != lease.Fence {
		t.Fatalf("release: fence %d, %v", fence, err)
	}
}

func TestReleaseAfterExpiryIsLeaseLost(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-lease.Context().Done() // an unmanaged lease ends at its local deadline too
	time.Sleep(200 * time.Millisecond)
	err = lease.Release(bg)
	var lost *lockbroker.LeaseLost
	if !errors.As(err, &lost) || lost.Status != 409 || !strings.Contains(lost.Message, "duplicated") {
		t.Fatalf("release after expiry: %v", err)
	}
	if !errors.Is(err, lockbroker.ErrLeaseLost) || !errors.Is(lease.Err(), lockbroker.ErrLeaseLost) {
		t.Fatalf("not ErrLeaseLost: %v / %v", err, lease.Err())
	}
}

func TestLockDelayKeepsAnExpiredLockUnavailable(t *testing.T) {
	client, name := newClient(t), lockName(t)
	if _, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 200 * time.Millisecond, LockDelay: time.Second}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // expired, not released
	status, _ := client.Status(bg, name)
	if status.Held || status.AvailableIn < 300*time.Millisecond || status.AvailableIn > time.Second {
		t.Fatalf("status in the lock-delay %+v", status)
	}
	var busy *lockbroker.LockBusy
	if _, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second}); !errors.As(err, &busy) {
		t.Fatalf("acquire in the lock-delay: %v", err)
	}
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(bg)
}

func TestTheSameRequestIDReturnsTheSameLease(t *testing.T) {
	client, name := newClient(t), lockName(t)
	options := lockbroker.AcquireOptions{TTL: 5 * time.Second, RequestID: "job-42", Owner: "worker-1"}
	first, err := client.Acquire(bg, name, options)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.Acquire(bg, name, options)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fence != first.Fence || again.Token() != first.Token() {
		t.Fatalf("a retry got another lease: fence %d vs %d", again.Fence, first.Fence)
	}
	_ = first.Release(bg)
}

// dropFirstAcquire is a proxy to the broker that, for the first acquire, lets
// the broker grant it and then closes the connection without answering, as a
// network failure would. It records every acquire's request_id and the fence
// of the grant it dropped.
type dropFirstAcquire struct {
	target     *url.URL
	mu         sync.Mutex
	requestIDs []string
	dropped    int64
}

func (p *dropFirstAcquire) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	forward, _ := http.NewRequest(r.Method, p.target.String()+r.URL.Path, bytes.NewReader(body))
	forward.Header = r.Header.Clone()
	response, err := http.DefaultTransport.RoundTrip(forward)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer response.Body.Close()
	answer, _ := io.ReadAll(response.Body)
	if strings.HasSuffix(r.URL.Path, "/acquire") {
		var sent struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(body, &sent)
		p.mu.Lock()
		p.requestIDs = append(p.requestIDs, sent.RequestID)
		first := len(p.requestIDs) == 1
		p.mu.Unlock()
		if first {
			var granted struct {
				Fence int64 `json:"fence"`
			}
			_ = json.Unmarshal(answer, &granted)
			p.mu.Lock()
			p.dropped = granted.Fence
			p.mu.Unlock()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
	}
	for key, values := range response.Header {
		w.Header()[key] = values
	}
	w.WriteHeader(response.StatusCode)
	_, _ = w.Write(answer)
}

func TestAnAcquireRetriedAfterALostAnswerGetsTheSameLease(t *testing.T) {
	target, _ := url.Parse(shared.URL)
	proxy := &dropFirstAcquire{target: target}
	server := httptest.NewServer(proxy)
	defer server.Close()
	client, name := clientOf(t, server.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second}), lockName(t)

	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Wait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(bg)
	proxy.mu.Lock()
	ids, dropped := append([]string(nil), proxy.requestIDs...), proxy.dropped
	proxy.mu.Unlock()
	if len(ids) < 2 || ids[0] == "" || ids[1] != ids[0] {
		t.Fatalf("request ids %v: the retry must carry the first one", ids)
	}
	if dropped == 0 || lease.Fence != dropped {
		t.Fatalf("the retry got fence %d, the dropped grant had %d", lease.Fence, dropped)
	}
}

func TestAnUnreachableBrokerIsUnavailable(t *testing.T) {
	listener, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := listener.Addr().String()
	listener.Close()
	client, name := clientOf(t, "http://"+addr, lockbroker.ClientOptions{Timeout: time.Second}), lockName(t)
	_, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	var down *lockbroker.Unavailable
	if !errors.As(err, &down) || down.Code != "transport" || down.Status != 0 || errors.Unwrap(&down.BrokerError) == nil {
		t.Fatalf("got %v", err)
	}
	started := time.Now()
	_, err = client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Wait: 800 * time.Millisecond})
	if !errors.As(err, &down) || time.Since(started) < 700*time.Millisecond {
		t.Fatalf("with a wait: %v after %s (retried until the wait runs out)", err, time.Since(started))
	}
}

func TestRedisDownIsUnavailableWithRetryAfter(t *testing.T) {
	redis := ownRedis(t)
	b := ownBroker(t, redis, nil)
	client := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second})
	redis.Stop()
	_, err := client.Acquire(bg, lockName(t), lockbroker.AcquireOptions{TTL: 5 * time.Second})
	var down *lockbroker.Unavailable
	if !errors.As(err, &down) || down.Status != 503 || down.Code != "backend_unavailable" || down.RetryAfter != time.Second {
		t.Fatalf("got %v (%+v)", err, down)
	}
}

func TestBadInputIsInvalidRequestNamingTheField(t *testing.T) {
	client := newClient(t)
	var bad *lockbroker.InvalidRequest
	_, err := client.Acquire(bg, "no spaces allowed", lockbroker.AcquireOptions{})
	if !errors.As(err, &bad) || bad.Status != 400 || bad.Field != "name" {
		t.Fatalf("bad name: %v", err)
	}
	_, err = client.Acquire(bg, lockName(t), lockbroker.AcquireOptions{TTL: 10 * 24 * time.Hour})
	if !errors.As(err, &bad) || bad.Field != "ttl_ms" {
		t.Fatalf("bad ttl: %v", err)
	}
}

func TestTheCallersContextCancelsAWait(t *testing.T) {
	client, name := newClient(t), lockName(t)
	holder, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(bg)
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	started := time.Now()
	_, err = client.Acquire(ctx, name, lockbroker.AcquireOptions{Wait: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(started) > 2*time.Second {
		t.Fatalf("got %v after %s", err, time.Since(started))
	}
}

func TestFairAcquires(t *testing.T) {
	client, name := newClient(t), lockName(t)
	first, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = first.Release(bg)
	}()
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: 5 * time.Second, Wait: 3 * time.Second, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence <= first.Fence {
		t.Fatalf("fence %d after %d", lease.Fence, first.Fence)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
}

func TestNoLockDelayAsksForNone(t *testing.T) {
	b := ownBroker(t, nil, map[string]string{"LOCKBROKER_LOCKS_DEFAULT_LOCK_DELAY_MS": "5000"})
	client, name := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second}), lockName(t)
	if _, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 200 * time.Millisecond, LockDelay: lockbroker.NoLockDelay}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // expired, not released: no lock-delay follows
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatalf("the broker's default lock-delay applied: %v", err)
	}
	_ = lease.Release(bg)
}

func TestALeaseForceReleasedNamesWhoDidIt(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	forceRelease(t, shared, name)
	err = lease.Extend(bg, 0)
	var lost *lockbroker.LeaseLost
	if !errors.As(err, &lost) || lost.ForceReleasedBy != "anonymous" {
		t.Fatalf("extending a force-released lease: %v (%+v)", err, lost)
	}
}
