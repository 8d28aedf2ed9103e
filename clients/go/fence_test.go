package lockbroker_test

// Fence checks against a real broker: a fence is current while its lease is
// valid and not after, not for a fence never issued nor an older one, a
// permit's on its semaphore only; answers carry no token, and names are
// escaped into the path.

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

// maxFence is the largest fence the API takes (2^53 - 1).
const maxFence = 1<<53 - 1

func checkFence(t *testing.T, client *lockbroker.Client, name string, fence int64) *lockbroker.FenceCheck {
	t.Helper()
	check, err := client.CheckFence(bg, name, fence)
	if err != nil {
		t.Fatalf("CheckFence(%q, %d): %v", name, fence, err)
	}
	return check
}

func TestAFenceIsCurrentWhileItsLeaseIsValidAndNotAfterRelease(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check := checkFence(t, client, name, lease.Fence)
	if check.Name != name || check.Fence != lease.Fence || !check.Current || !check.Held ||
		check.ExpiresIn <= 0 || check.ExpiresIn > 5*time.Second {
		t.Fatalf("a held lease's fence: %+v", check)
	}
	own, err := lease.CheckFence(bg)
	if err != nil || !own.Current || own.Fence != lease.Fence || own.Name != name {
		t.Fatalf("lease.CheckFence: %+v, %v", own, err)
	}
	// A check is a read: the lease is still held, by this client's account too.
	if lease.Err() != nil || lease.Context().Err() != nil {
		t.Fatalf("after a check the lease reports %v", lease.Err())
	}

	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	after := checkFence(t, client, name, lease.Fence)
	if after.Current || after.Held || after.ExpiresIn != 0 || after.Fence != lease.Fence {
		t.Fatalf("after release: %+v", after)
	}
	if own, err := lease.CheckFence(bg); err != nil || own.Current {
		t.Fatalf("lease.CheckFence after release: %+v, %v", own, err)
	}
}

func TestAnOlderOrAWrongFenceIsNotCurrent(t *testing.T) {
	client, name := newClient(t), lockName(t)
	older, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := older.Release(bg); err != nil {
		t.Fatal(err)
	}
	newer, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Release(bg)
	if newer.Fence <= older.Fence {
		t.Fatalf("fences %d then %d", older.Fence, newer.Fence)
	}
	// Not current, but the name is held (by the newer lease, whose expiry it gives).
	for _, fence := range []int64{older.Fence, maxFence} {
		stale := checkFence(t, client, name, fence)
		if stale.Current || !stale.Held || stale.Fence != fence || stale.ExpiresIn <= 0 ||
			stale.ExpiresIn > 5*time.Second {
			t.Fatalf("fence %d beside the newer lease: %+v", fence, stale)
		}
	}
	if !checkFence(t, client, name, newer.Fence).Current {
		t.Fatal("the newer lease's fence is not current")
	}
}

func TestALeaseLostAfterItsTTLHasNoCurrentFence(t *testing.T) {
	client, name := newClient(t), lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("an unrenewed lease outlived its TTL")
	}
	time.Sleep(100 * time.Millisecond) // the broker's expiry comes a little after the local deadline
	if check := checkFence(t, client, name, lease.Fence); check.Current || check.Held {
		t.Fatalf("an expired lease's fence: %+v", check)
	}
}

func TestASemaphorePermitFenceIsCheckedOnTheSemaphore(t *testing.T) {
	client, name := newClient(t), lockName(t)
	first, err := client.AcquirePermit(bg, name, 2, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	second, err := client.AcquirePermit(bg, name, 2, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(bg)
	if check, err := client.CheckSemaphoreFence(bg, name, first.Fence); err != nil || !check.Current || !check.Held {
		t.Fatalf("a held permit's fence: %+v, %v", check, err)
	}
	if check, err := second.CheckFence(bg); err != nil || !check.Current {
		t.Fatalf("permit.CheckFence: %+v, %v", check, err)
	}
	// The permit's fence belongs to the semaphore, not to a lock of that name.
	if check := checkFence(t, client, name, first.Fence); check.Current || check.Held {
		t.Fatalf("a permit's fence checked on the lock: %+v", check)
	}
	if err := first.Release(bg); err != nil {
		t.Fatal(err)
	}
	gone, err := client.CheckSemaphoreFence(bg, name, first.Fence)
	if err != nil || gone.Current || !gone.Held {
		t.Fatalf("a released permit's fence beside a held one: %+v, %v", gone, err)
	}
}

func TestABadFenceOrNameIsAnInvalidRequest(t *testing.T) {
	client, name := newClient(t), lockName(t)
	for _, fence := range []int64{0, -1, 1 << 53} {
		_, err := client.CheckFence(bg, name, fence)
		var invalid *lockbroker.InvalidRequest
		if !errors.As(err, &invalid) || invalid.Status != 400 || invalid.Field != "fence" {
			t.Fatalf("fence %d: %v", fence, err)
		}
	}
	// "/" and " " reach the broker escaped, inside the name: it refuses the
	// name rather than routing the request elsewhere (a 404).
	for _, bad := range []string{"no spaces", "billing/42", "a?b"} {
		_, err := client.CheckSemaphoreFence(bg, bad, 1)
		var invalid *lockbroker.InvalidRequest
		if !errors.As(err, &invalid) || invalid.Status != 400 || invalid.Field != "name" {
			t.Fatalf("name %q: %v", bad, err)
		}
	}
	if _, err := client.CheckFence(bg, "", 1); err == nil {
		t.Fatal("an empty name was sent")
	}
}

// wireTap is a RoundTripper that keeps each request's escaped path and each
// answer's body, as they crossed the wire.
type wireTap struct {
	mu     sync.Mutex
	paths  []string
	bodies [][]byte
}

func (r *wireTap) RoundTrip(request *http.Request) (*http.Response, error) {
	response, err := http.DefaultTransport.RoundTrip(request)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(response.Body)
	response.Body.Close()
	if err != nil {
		return nil, err
	}
	response.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths = append(r.paths, request.URL.EscapedPath())
	r.bodies = append(r.bodies, body)
	return response, nil
}

func TestAFenceCheckNeverCarriesATokenAndEscapesTheName(t *testing.T) {
	wire := &wireTap{}
	client := clientOf(t, shared.URL, lockbroker.ClientOptions{HTTPClient: &http.Client{Transport: wire}})
	name := "billing:" + lockName(t)
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(bg)
	permit, err := client.AcquirePermit(bg, name, 1, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer permit.Release(bg)
	before := len(wire.paths)
	if _, err := lease.CheckFence(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := permit.CheckFence(bg); err != nil {
		t.Fatal(err)
	}
	_, _ = client.CheckFence(bg, "billing/42", 7)

	wire.mu.Lock()
	defer wire.mu.Unlock()
	paths, bodies := wire.paths[before:], wire.bodies[before:]
	want := []string{
		"/v1/locks/" + name + "/fence/" + strconv.FormatInt(lease.Fence, 10),
		"/v1/semaphores/" + name + "/fence/" + strconv.FormatInt(permit.Fence, 10),
		"/v1/locks/billing%2F42/fence/7",
	}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("paths %q, want %q", paths, want)
	}
	for i, body := range bodies[:2] {
		if !bytes.Contains(body, []byte(`"current":true`)) {
			t.Fatalf("answer %d is not a current fence check: %s", i, body)
		}
		for _, token := range []string{lease.Token(), permit.Token()} {
			if bytes.Contains(body, []byte(token)) || bytes.Contains(body, []byte(`"token"`)) {
				t.Fatalf("a fence check answer carries a token: %s", body)
			}
		}
	}
}
