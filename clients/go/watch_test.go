package lockbroker_test

// Watch against a real broker: the events of a lease in order, and a stream cut
// in the middle resumed with Last-Event-ID, missing nothing and repeating
// nothing.

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

// nextEvent is the watch's next event within 5 s.
func nextEvent(t *testing.T, w *lockbroker.Watcher) lockbroker.Event {
	t.Helper()
	got := make(chan lockbroker.Event, 1)
	fail := make(chan error, 1)
	go func() {
		event, err := w.Next()
		if err != nil {
			fail <- err
			return
		}
		got <- event
	}()
	select {
	case event := <-got:
		return event
	case err := <-fail:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
	return nil
}

// change is the next event, which must be a change of type kind.
func change(t *testing.T, w *lockbroker.Watcher, kind string) *lockbroker.LockEvent {
	t.Helper()
	event := nextEvent(t, w)
	change, ok := event.(*lockbroker.LockEvent)
	if !ok || change.Type != kind {
		t.Fatalf("wanted %s, got %#v", kind, event)
	}
	return change
}

func TestWatchSendsTheStateThenEveryChangeInOrder(t *testing.T) {
	client, name := newClient(t), lockName(t)
	w, err := client.Watch(bg, name, lockbroker.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	state, ok := nextEvent(t, w).(*lockbroker.LockState)
	if !ok || state.Held || state.Name != name {
		t.Fatalf("first event: %#v", state)
	}
	lease, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second, Owner: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	acquired := change(t, w, "acquired")
	if acquired.Fence != lease.Fence || acquired.Owner != "watched" || acquired.Mode != lockbroker.ModeExclusive ||
		acquired.ExpiresIn <= 0 || acquired.ExpiresAtMs == 0 || acquired.ID == "" {
		t.Fatalf("acquired: %+v", acquired)
	}
	if err := lease.Extend(bg, 0); err != nil {
		t.Fatal(err)
	}
	if extended := change(t, w, "extended"); extended.Fence != lease.Fence {
		t.Fatalf("extended: %+v", extended)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	released := change(t, w, "released")
	if released.Fence != lease.Fence || released.ExpiresIn != 0 || strings.Contains(released.ID, lease.Token()) {
		t.Fatalf("released: %+v", released)
	}
	if w.LastEventID() != released.ID {
		t.Fatalf("LastEventID %q, last event %q", w.LastEventID(), released.ID)
	}
	w.Close()
	if _, err := w.Next(); !errors.Is(err, lockbroker.ErrWatchClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestWatchResumesAfterTheStreamIsCut(t *testing.T) {
	client, name := newClient(t), lockName(t)
	proxy := newCutProxy(t, strings.TrimPrefix(shared.URL, "http://"))
	watching := clientOf(t, "http://"+proxy.addr, lockbroker.ClientOptions{Timeout: 5 * time.Second})
	w, err := watching.Watch(bg, name, lockbroker.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok := nextEvent(t, w).(*lockbroker.LockState); !ok {
		t.Fatal("no opening state")
	}
	first, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	change(t, w, "acquired")

	// Changes made while the stream is down come with the resume, without a
	// fresh state and without repeating the acquired already seen.
	proxy.cut()
	if err := first.Release(bg); err != nil {
		t.Fatal(err)
	}
	second, err := client.Acquire(bg, name, lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(bg)
	if released := change(t, w, "released"); released.Fence != first.Fence {
		t.Fatalf("released after the cut: %+v", released)
	}
	if acquired := change(t, w, "acquired"); acquired.Fence != second.Fence {
		t.Fatalf("acquired after the cut: %+v", acquired)
	}
	if proxy.connections() < 2 {
		t.Fatal("the watch did not connect again")
	}
}

// cutProxy forwards TCP connections to a broker until cut closes them all.
type cutProxy struct {
	addr     string
	mu       sync.Mutex
	open     []net.Conn
	accepted int
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close() })
	p := &cutProxy{addr: listener.Addr().String()}
	t.Cleanup(p.cut)
	go func() {
		for {
			in, err := listener.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.open = append(p.open, in, out)
			p.accepted++
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range p.open {
		conn.Close()
	}
	p.open = nil
}

func (p *cutProxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func TestWatchPrefixSendsEachHeldLockThenCompleteThenChanges(t *testing.T) {
	client, prefix := newClient(t), lockName(t)+":"
	held, err := client.Acquire(bg, prefix+"a", lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(bg)
	w, err := client.WatchPrefix(bg, prefix, lockbroker.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if state, ok := nextEvent(t, w).(*lockbroker.LockState); !ok || state.Name != prefix+"a" || !state.Held {
		t.Fatalf("first event: %#v", state)
	}
	if marker, ok := nextEvent(t, w).(*lockbroker.StateComplete); !ok || marker.Prefix != prefix {
		t.Fatalf("second event: %#v", marker)
	}
	other, err := client.Acquire(bg, prefix+"b", lockbroker.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(bg)
	if acquired := change(t, w, "acquired"); acquired.Name != prefix+"b" {
		t.Fatalf("acquired: %+v", acquired)
	}
}

func TestWatchWaitsOutTooManyStreams(t *testing.T) {
	broker := ownBroker(t, nil, map[string]string{"LOCKBROKER_HTTP_MAX_EVENT_STREAMS": "1"})
	client, name := clientOf(t, broker.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second}), lockName(t)
	first, err := client.Watch(bg, name, lockbroker.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	nextEvent(t, first)
	second, err := client.Watch(bg, name, lockbroker.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The broker answers 429 too_many_streams while the first stream is open:
	// the second asks again until the first one closes.
	time.Sleep(300 * time.Millisecond)
	first.Close()
	if _, ok := nextEvent(t, second).(*lockbroker.LockState); !ok {
		t.Fatal("the second watch did not open once a stream was free")
	}
}
