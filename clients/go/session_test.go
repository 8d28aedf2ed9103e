package lockbroker_test

// Sessions: the helper's keepalives, its leases' ends with it, and the single
// calls, against a real broker.

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

// openSession opens a session on client, closed when the test ends.
func openSession(t *testing.T, client *lockbroker.Client, options lockbroker.SessionOptions) *lockbroker.Session {
	t.Helper()
	session, err := client.OpenSession(bg, options)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = session.Close(bg) })
	return session
}

// requests counts the recorded requests whose path ends with suffix.
func (r *recorder) requests(suffix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, path := range r.paths {
		if strings.HasSuffix(path, suffix) {
			n++
		}
	}
	return n
}

// waitDone fails the test unless done is closed within limit.
func waitDone(t *testing.T, what string, done <-chan struct{}, limit time.Duration) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: not done within %s", what, limit)
	}
}

func TestASessionKeepsAHundredLeasesPastItsTTLWithKeepalivesOnly(t *testing.T) {
	rec := &recorder{}
	client := clientOf(t, shared.URL, lockbroker.ClientOptions{HTTPClient: &http.Client{Transport: rec}})
	ttl := 1500 * time.Millisecond
	session := openSession(t, client, lockbroker.SessionOptions{TTL: ttl, Owner: "batch-7"})
	if session.TTL() != ttl || session.Owner() != "batch-7" || len(session.ID()) != 16 {
		t.Fatalf("opened %v", session)
	}
	base := lockName(t)
	var leases []*lockbroker.Lease
	for i := 0; i < 70; i++ {
		lease, err := session.Acquire(bg, fmt.Sprintf("%s-%d", base, i), lockbroker.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	var asks []lockbroker.LockAsk
	for i := 70; i < 90; i++ {
		asks = append(asks, lockbroker.LockAsk{Name: fmt.Sprintf("%s-%d", base, i), Shared: i%2 == 0})
	}
	all, err := session.AcquireAll(bg, asks, lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leases = append(leases, all...)
	semaphore := base + "-slots"
	for i := 0; i < 10; i++ {
		permit, err := session.AcquirePermit(bg, semaphore, 10, lockbroker.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, permit)
	}
	for _, lease := range leases {
		if lease.Owner != "batch-7" || lease.TTL != ttl {
			t.Fatalf("a lease under the session: %v (TTL %s)", lease, lease.TTL)
		}
	}

	time.Sleep(2 * ttl) // only the session's keepalives can keep them

	status, err := session.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !status.Open || status.Leases != 100 || status.TTL != ttl || status.Owner != "batch-7" {
		t.Fatalf("session status %+v", status)
	}
	for _, lease := range leases[:90] {
		held, err := client.Status(bg, lease.Name)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, holder := range held.Holders {
			found = found || holder.Fence == lease.Fence
		}
		if !held.Held || !found {
			t.Fatalf("%s after %s: %+v", lease.Name, 2*ttl, held)
		}
	}
	permits, err := client.SemaphoreStatus(bg, semaphore)
	if err != nil || permits.Held != 10 {
		t.Fatalf("semaphore status %+v, %v", permits, err)
	}
	for _, lease := range leases {
		if lease.Err() != nil || lease.Context().Err() != nil || lease.Remaining() <= 0 {
			t.Fatalf("%v: Err %v, Context %v", lease, lease.Err(), lease.Context().Err())
		}
	}
	if extends := rec.requests("/extend"); extends != 0 {
		t.Fatalf("%d extend requests for leases under a session", extends)
	}
	if keepalives := rec.requests("/keepalive"); keepalives < 4 {
		t.Fatalf("%d keepalives in %s with a TTL of %s", keepalives, 2*ttl, ttl)
	}
	if err := session.Close(bg); err != nil {
		t.Fatal(err)
	}
	if released := session.LeasesReleased(); released != 100 {
		t.Fatalf("the close released %d leases", released)
	}
}

func TestClosingASessionReleasesEveryLeaseUnderIt(t *testing.T) {
	client, name := newClient(t), lockName(t)
	session := openSession(t, client, lockbroker.SessionOptions{TTL: 5 * time.Second, LockDelay: 2 * time.Second})
	exclusive, err := session.Acquire(bg, name+"-a", lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sharedLease, err := session.Acquire(bg, name+"-b", lockbroker.AcquireOptions{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	permit, err := session.AcquirePermit(bg, name+"-slots", 2, lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := session.AcquireAll(bg, []lockbroker.LockAsk{{Name: name + "-c"}, {Name: name + "-d"}},
		lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leases := append([]*lockbroker.Lease{exclusive, sharedLease, permit}, pair...)

	if err := session.Close(bg); err != nil {
		t.Fatal(err)
	}
	if session.LeasesReleased() != 5 || !errors.Is(session.Err(), lockbroker.ErrSessionClosed) ||
		session.Context().Err() == nil || !strings.Contains(session.String(), "closed") {
		t.Fatalf("after Close: released %d, Err %v, %v", session.LeasesReleased(), session.Err(), session)
	}
	select {
	case <-session.Lost():
		t.Fatal("Lost closed by a Close")
	default:
	}
	for _, lease := range leases {
		if !errors.Is(lease.Err(), lockbroker.ErrReleased) || lease.Context().Err() == nil {
			t.Fatalf("%v after the session's close: Err %v", lease, lease.Err())
		}
		if err := lease.Release(bg); err != nil {
			t.Fatalf("Release of a lease its session's close released: %v", err)
		}
	}
	// A close releases: no lock-delay keeps the locks.
	for _, lock := range []string{name + "-a", name + "-b", name + "-c", name + "-d"} {
		if status, err := client.Status(bg, lock); err != nil || status.Held || status.AvailableIn > 0 {
			t.Fatalf("%s after the close: %+v, %v", lock, status, err)
		}
	}
	if permits, err := client.SemaphoreStatus(bg, name+"-slots"); err != nil || permits.Held != 0 {
		t.Fatalf("semaphore after the close: %+v, %v", permits, err)
	}
	if status, err := session.Status(bg); err != nil || status.Open {
		t.Fatalf("session status after the close: %+v, %v", status, err)
	}
	if err := session.Close(bg); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

func TestASessionClosedElsewhereIsLostWithEveryLeaseUnderIt(t *testing.T) {
	client, name := newClient(t), lockName(t)
	ttl := 900 * time.Millisecond
	session := openSession(t, client, lockbroker.SessionOptions{TTL: ttl})
	lease, err := session.Acquire(bg, name, lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	permit, err := session.AcquirePermit(bg, name+"-slots", 3, lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	released, err := client.CloseSession(bg, session.ID(), session.Token())
	if err != nil || released != 2 {
		t.Fatalf("CloseSession: %d, %v", released, err)
	}
	closed := time.Now()
	waitDone(t, "the session's Lost", session.Lost(), 2*ttl)
	if took := time.Since(closed); took > ttl/3+500*time.Millisecond {
		t.Fatalf("seen lost %s after the close, later than its next keepalive", took)
	}
	var lost *lockbroker.SessionLost
	if !errors.As(session.Err(), &lost) || lost.Reason != "session_lost" || lost.Status != 409 ||
		!errors.Is(session.Err(), lockbroker.ErrSessionLost) || errors.Is(session.Err(), lockbroker.ErrLeaseLost) {
		t.Fatalf("session Err() = %#v", session.Err())
	}
	if session.Context().Err() == nil || !strings.Contains(session.String(), "lost") {
		t.Fatalf("a lost session: Context %v, %v", session.Context().Err(), session)
	}
	for _, l := range []*lockbroker.Lease{lease, permit} {
		waitDone(t, "a lease's Context", l.Context().Done(), time.Second)
		var leaseLost *lockbroker.LeaseLost
		if !errors.As(l.Err(), &leaseLost) || leaseLost.Reason != "session_lost" ||
			!errors.Is(l.Err(), lockbroker.ErrLeaseLost) || !errors.Is(l.Err(), lockbroker.ErrSessionLost) {
			t.Fatalf("%v: Err() = %v", l, l.Err())
		}
		if l.Remaining() != 0 || !strings.Contains(l.String(), "lost") {
			t.Fatalf("a lost lease reads %v", l)
		}
	}
	if _, err := session.Acquire(bg, name+"-late", lockbroker.AcquireOptions{}); !errors.Is(err, lockbroker.ErrSessionLost) {
		t.Fatalf("Acquire under a lost session: %v", err)
	}
	// The broker said it is gone: Close has nothing to ask, and says so.
	if err := session.Close(bg); !errors.Is(err, lockbroker.ErrSessionLost) {
		t.Fatalf("Close of a lost session: %v", err)
	}
}

func TestAnAcquireRefusedForTheSessionMarksItLostAtOnce(t *testing.T) {
	client, name := newClient(t), lockName(t)
	session := openSession(t, client, lockbroker.SessionOptions{TTL: 30 * time.Second})
	first, err := session.Acquire(bg, name, lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CloseSession(bg, session.ID(), session.Token()); err != nil {
		t.Fatal(err)
	}
	// The next keepalive is 10 s away: the refusal itself tells the helper.
	_, err = session.Acquire(bg, name+"-second", lockbroker.AcquireOptions{})
	var lost *lockbroker.SessionLost
	if !errors.As(err, &lost) || lost.Status != 409 || lost.Code != "session_lost" {
		t.Fatalf("Acquire under a session closed elsewhere: %v", err)
	}
	waitDone(t, "the session's Lost", session.Lost(), 100*time.Millisecond)
	if !errors.Is(first.Err(), lockbroker.ErrSessionLost) || first.Context().Err() == nil {
		t.Fatalf("the earlier lease: Err %v", first.Err())
	}
}

func TestAnAcquireUnderAClosedSessionIsSessionLost(t *testing.T) {
	rec := &recorder{}
	client, name := clientOf(t, shared.URL, lockbroker.ClientOptions{HTTPClient: &http.Client{Transport: rec}}), lockName(t)
	session := openSession(t, client, lockbroker.SessionOptions{TTL: 5 * time.Second})
	token := session.Token()
	if err := session.Close(bg); err != nil {
		t.Fatal(err)
	}
	asked := len(rec.paths)
	// The helper knows it closed the session: it refuses without asking.
	checks := map[string]func() error{
		"Acquire": func() error {
			_, err := session.Acquire(bg, name, lockbroker.AcquireOptions{})
			return err
		},
		"AcquirePermit": func() error {
			_, err := session.AcquirePermit(bg, name, 2, lockbroker.AcquireOptions{})
			return err
		},
		"AcquireAll": func() error {
			_, err := session.AcquireAll(bg, []lockbroker.LockAsk{{Name: name}}, lockbroker.AcquireOptions{})
			return err
		},
	}
	for what, check := range checks {
		err := check()
		var lost *lockbroker.SessionLost
		if !errors.As(err, &lost) || lost.Reason != "closed" || !errors.Is(err, lockbroker.ErrSessionLost) ||
			errors.Is(err, lockbroker.ErrLeaseLost) {
			t.Fatalf("%s under a closed session: %v", what, err)
		}
	}
	if len(rec.paths) != asked {
		t.Fatalf("the helper asked the broker about a session it closed: %v", rec.paths[asked:])
	}
	// The broker says the same to the single calls with the token.
	brokerSays := map[string]func() error{
		"Acquire": func() error {
			_, err := client.Acquire(bg, name, lockbroker.AcquireOptions{Session: token})
			return err
		},
		"AcquirePermit": func() error {
			_, err := client.AcquirePermit(bg, name, 2, lockbroker.AcquireOptions{Session: token})
			return err
		},
		"AcquireAll": func() error {
			_, err := client.AcquireAll(bg, []lockbroker.LockAsk{{Name: name}}, lockbroker.AcquireOptions{Session: token})
			return err
		},
		"KeepSession": func() error {
			_, err := client.KeepSession(bg, session.ID(), token)
			return err
		},
	}
	for what, check := range brokerSays {
		err := check()
		var lost *lockbroker.SessionLost
		if !errors.As(err, &lost) || lost.Status != 409 || lost.Code != "session_lost" ||
			!errors.Is(err, lockbroker.ErrSessionLost) || errors.Is(err, lockbroker.ErrLeaseLost) {
			t.Fatalf("%s with a closed session's token: %v", what, err)
		}
	}
	if status, err := client.Status(bg, name); err != nil || status.Held {
		t.Fatalf("a refused acquire left %+v, %v", status, err)
	}
	// A close sent again (its answer lost, say) answers as the first did.
	if released, err := client.CloseSession(bg, session.ID(), token); err != nil || released != 0 {
		t.Fatalf("CloseSession again: %d, %v", released, err)
	}
}

func TestASessionWhoseKeepalivesCannotReachTheBrokerIsLostByItsTTL(t *testing.T) {
	b := ownBroker(t, nil, nil)
	client, name := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 300 * time.Millisecond}), lockName(t)
	ttl := 1500 * time.Millisecond
	session := openSession(t, client, lockbroker.SessionOptions{TTL: ttl})
	lease, err := session.Acquire(bg, name, lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Pause()
	paused := time.Now()
	waitDone(t, "the session's Lost", session.Lost(), 3*time.Second)
	if took := time.Since(paused); took > ttl+100*time.Millisecond {
		t.Fatalf("the session was lost %s after the pause, later than its TTL", took)
	}
	var lost *lockbroker.SessionLost
	if !errors.As(session.Err(), &lost) || lost.Reason != "expired" {
		t.Fatalf("session Err() = %v", session.Err())
	}
	var leaseLost *lockbroker.LeaseLost
	if !errors.As(lease.Err(), &leaseLost) || leaseLost.Reason != "session_lost" || lease.Context().Err() == nil {
		t.Fatalf("the lease: Err %v, Context %v", lease.Err(), lease.Context().Err())
	}
	time.Sleep(300 * time.Millisecond) // past the broker's own expiry
	b.Resume()
	if status, err := client.Status(bg, name); err != nil || status.Held {
		t.Fatalf("status after the session's expiry: %+v, %v", status, err)
	}
}

func TestALeaseThatEndsOutsideItsSessionIsLostAndTheOthersStay(t *testing.T) {
	client, name := newClient(t), lockName(t)
	ttl := 900 * time.Millisecond
	session, forced, kept := sessionWithTwoLeases(t, client, name, ttl)
	// Released by its holder, then the name taken again under the session:
	// the keepalive names it as ended, yet the new lease is held.
	released, err := session.Acquire(bg, name+"-again", lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := released.Release(bg); err != nil {
		t.Fatal(err)
	}
	again, err := session.Acquire(bg, name+"-again", lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forceRelease(t, shared, name+"-forced")

	waitDone(t, "the force-released lease's Context", forced.Context().Done(), 2*ttl)
	var lost *lockbroker.LeaseLost
	if !errors.As(forced.Err(), &lost) || lost.Reason != "lease_lost" || errors.Is(forced.Err(), lockbroker.ErrSessionLost) {
		t.Fatalf("the force-released lease: Err %v", forced.Err())
	}
	time.Sleep(ttl) // more keepalives, with the ended leases taken out
	if session.Err() != nil || kept.Err() != nil || again.Err() != nil || !errors.Is(released.Err(), lockbroker.ErrReleased) {
		t.Fatalf("session %v, kept %v, again %v, released %v", session.Err(), kept.Err(), again.Err(), released.Err())
	}
	if status, err := session.Status(bg); err != nil || status.Leases != 2 {
		t.Fatalf("session status %+v, %v", status, err)
	}
	if err := forced.Release(bg); !errors.Is(err, lockbroker.ErrLeaseLost) {
		t.Fatalf("Release of the force-released lease: %v", err)
	}
}

func TestALeaseWhoseEndWasToldInALostAnswerIsStillFoundLost(t *testing.T) {
	client, name := newClient(t), lockName(t)
	ttl := 900 * time.Millisecond
	session, forced, kept := sessionWithTwoLeases(t, client, name, ttl)
	forceRelease(t, shared, name+"-forced")
	// A keepalive of its own takes the one answer that names the ended
	// lease, as if the session's answer had been lost on its way: the
	// session's next keepalive renews one lease of the two it holds.
	renewal, err := client.KeepSession(bg, session.ID(), session.Token())
	if err != nil || renewal.Leases != 1 {
		t.Fatalf("the keepalive that took the answer: %+v, %v", renewal, err)
	}

	waitDone(t, "the force-released lease's Context", forced.Context().Done(), 2*ttl)
	var lost *lockbroker.LeaseLost
	if !errors.As(forced.Err(), &lost) || lost.Reason != "lease_lost" {
		t.Fatalf("the force-released lease: Err %v", forced.Err())
	}
	time.Sleep(ttl)
	if session.Err() != nil || kept.Err() != nil {
		t.Fatalf("session %v, kept %v", session.Err(), kept.Err())
	}
}

func TestAFullSessionRefusesMoreLeases(t *testing.T) {
	b := ownBroker(t, nil, map[string]string{"LOCKBROKER_LOCKS_MAX_LEASES_PER_SESSION": "2"})
	client, name := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second}), lockName(t)
	session := openSession(t, client, lockbroker.SessionOptions{TTL: 5 * time.Second})
	for i := 0; i < 2; i++ {
		if _, err := session.Acquire(bg, fmt.Sprintf("%s-%d", name, i), lockbroker.AcquireOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := session.Acquire(bg, name+"-2", lockbroker.AcquireOptions{})
	var full *lockbroker.SessionFull
	if !errors.As(err, &full) || full.Status != 409 || full.Code != "session_full" || errors.Is(err, lockbroker.ErrSessionLost) {
		t.Fatalf("a third lease under a session of two: %v", err)
	}
	if session.Err() != nil {
		t.Fatalf("a full session reports %v", session.Err())
	}
	if status, err := client.Status(bg, name+"-2"); err != nil || status.Held {
		t.Fatalf("the refused lock: %+v, %v", status, err)
	}
}

func TestALeaseUnderASessionTakesItsTermsFromTheSession(t *testing.T) {
	client, name := newClient(t), lockName(t)
	session := openSession(t, client, lockbroker.SessionOptions{TTL: 5 * time.Second})
	for _, options := range []lockbroker.AcquireOptions{{TTL: time.Second}, {LockDelay: time.Second},
		{Session: "0123456789abcdef.0123456789abcdef0123456789abcdef"}} {
		if _, err := session.Acquire(bg, name, options); err == nil {
			t.Fatalf("Acquire under a session with %+v was sent", options)
		}
	}
	if _, err := client.Acquire(bg, name, lockbroker.AcquireOptions{Session: session.Token(), TTL: time.Second}); err == nil {
		t.Fatal("an acquire with both a session and a TTL was sent")
	}
	lease, err := session.Acquire(bg, name, lockbroker.AcquireOptions{Owner: "worker-3"})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Owner != "worker-3" {
		t.Fatalf("owner %q", lease.Owner)
	}
	if err := lease.Extend(bg, 0); err == nil || errors.Is(err, lockbroker.ErrLeaseLost) {
		t.Fatalf("Extend of a lease under a session: %v", err)
	}
	// The single call by token: the lease is the session's, with its TTL.
	plain, err := client.Acquire(bg, name+"-plain", lockbroker.AcquireOptions{Session: session.Token()})
	if err != nil {
		t.Fatal(err)
	}
	if plain.TTL <= 0 || plain.TTL > 5*time.Second {
		t.Fatalf("a lease by token under a session of 5 s: TTL %s", plain.TTL)
	}
	if status, err := session.Status(bg); err != nil || status.Leases != 2 {
		t.Fatalf("session status %+v, %v", status, err)
	}
}

func TestASessionsTokenNeverShows(t *testing.T) {
	rec := &recorder{}
	client, name := clientOf(t, shared.URL, lockbroker.ClientOptions{HTTPClient: &http.Client{Transport: rec}}), lockName(t)
	session := openSession(t, client, lockbroker.SessionOptions{TTL: 5 * time.Second})
	token := session.Token()
	id, secret, ok := strings.Cut(token, ".")
	if !ok || id != session.ID() || len(secret) != 32 {
		t.Fatalf("a token not of the form <id>.<32 hex>: %d characters", len(token))
	}
	lease, err := session.Acquire(bg, name, lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status, err := session.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	holder := struct{ Session *lockbroker.Session }{session}
	var shown []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T", "%p"} {
		shown = append(shown, fmt.Sprintf(verb, session), fmt.Sprintf(verb, holder), fmt.Sprintf(verb, status),
			fmt.Sprintf(verb, lease))
	}
	shown = append(shown, session.String(), session.GoString(), fmt.Sprint(session), fmt.Sprintln(session))

	if err := session.Close(bg); err != nil {
		t.Fatal(err)
	}
	_, err = session.Acquire(bg, name, lockbroker.AcquireOptions{})
	shown = append(shown, err.Error(), fmt.Sprintf("%#v", err), fmt.Sprintf("%+v", err))
	for _, call := range []func() error{
		func() error { _, err := client.KeepSession(bg, session.ID(), token); return err },
		func() error {
			_, err := client.Acquire(bg, name, lockbroker.AcquireOptions{Session: token})
			return err
		},
		func() error {
			_, err := client.Acquire(bg, name, lockbroker.AcquireOptions{Session: token + "0"})
			return err
		},
		func() error { _, err := client.KeepSession(bg, session.ID(), "not-a-token"+secret); return err },
	} {
		err := call()
		if err == nil {
			t.Fatal("a call with a closed session's token succeeded")
		}
		shown = append(shown, err.Error(), fmt.Sprintf("%#v", err), fmt.Sprintf("%+v", err))
	}
	shown = append(shown, fmt.Sprintf("%#v", session), session.Err().Error())
	for _, text := range shown {
		if strings.Contains(text, secret) {
			t.Fatalf("the session's token shows in %q", text)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, path := range rec.paths {
		if strings.Contains(path, secret) {
			t.Fatalf("the session's token went into a URL: %s", path)
		}
	}
}

func TestLeasesTakenWhileASessionKeepsAliveAllStay(t *testing.T) {
	client, name := newClient(t), lockName(t)
	ttl := 600 * time.Millisecond
	session := openSession(t, client, lockbroker.SessionOptions{TTL: ttl})
	var wg sync.WaitGroup
	leases := make([]*lockbroker.Lease, 20)
	errs := make([]error, 20)
	for i := range leases {
		i := i
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * ttl / 10) // across several keepalives
			leases[i], errs[i] = session.Acquire(bg, fmt.Sprintf("%s-%d", name, i), lockbroker.AcquireOptions{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
	}
	time.Sleep(2 * ttl)
	for _, lease := range leases {
		if lease.Err() != nil {
			t.Fatalf("%v: %v", lease, lease.Err())
		}
		if status, err := client.Status(bg, lease.Name); err != nil || !status.Held || status.Fence != lease.Fence {
			t.Fatalf("%s: %+v, %v", lease.Name, status, err)
		}
	}
}

// sessionWithTwoLeases opens a session of ttl holding two leases: one on
// name-forced, which the test ends from outside, and one on name-kept.
func sessionWithTwoLeases(t *testing.T, client *lockbroker.Client, name string, ttl time.Duration) (*lockbroker.Session, *lockbroker.Lease, *lockbroker.Lease) {
	t.Helper()
	session := openSession(t, client, lockbroker.SessionOptions{TTL: ttl})
	forced, err := session.Acquire(bg, name+"-forced", lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := session.Acquire(bg, name+"-kept", lockbroker.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return session, forced, kept
}
