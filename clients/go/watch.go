package lockbroker

// Watching: a lock's (or every lock's under a prefix) event stream, opened
// again with Last-Event-ID whenever it drops, so the caller sees one stream.

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// DefaultIdleTimeout is how long a stream may stay silent before it is opened
// again; the broker sends a keep-alive every 15 s.
const DefaultIdleTimeout = 45 * time.Second

// The pauses between reconnects: doubling from the first to the longest, each
// between half and all of its step.
const (
	reconnectFirst   = 250 * time.Millisecond
	reconnectLongest = 15 * time.Second
)

// ErrWatchClosed is what Next returns once the watch was closed.
var ErrWatchClosed = errors.New("lockbroker: watch closed")

// WatchOptions are the optional arguments of Watch and WatchPrefix.
type WatchOptions struct {
	// LastEventID resumes after that event (a Watcher's LastEventID).
	LastEventID string
	// IdleTimeout: a stream silent that long is opened again; 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Watcher reads one event stream until Close. Next and Close are safe to call
// from different goroutines.
type Watcher struct {
	client *Client
	path   string
	idle   time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	events chan Event
	done   chan struct{} // closed when the reading goroutine ends

	mu     sync.Mutex
	lastID string
	err    error // why reading ended
}

// Watch reads the lock's events (GET /v1/locks/{name}/events): a *LockState
// first, then a *LockEvent per change, a *Lagged (and a fresh *LockState) when
// this reader fell behind. A dropped or silent stream is opened again with
// growing pauses (0.25 s doubling to 15 s, never shorter than a Retry-After),
// sending Last-Event-ID, and events that a resume repeats are left out; 429
// too_many_streams, 503 and an unreachable broker are retried that way. A
// refused key (*AuthError) or request (*InvalidRequest) ends the watch: Next
// returns that error. ctx, once done, ends the watch as Close does.
func (c *Client) Watch(ctx context.Context, name string, options WatchOptions) (*Watcher, error) {
	if name == "" {
		return nil, errors.New("lockbroker: the lock name must not be empty")
	}
	return c.watch(ctx, lockPath(name, "events"), options)
}

// WatchPrefix reads the events of every lock whose name starts with prefix (""
// is every lock; GET /v1/events?prefix=): one *LockState per held lock, then a
// *StateComplete, then changes, as Watch does for one lock.
func (c *Client) WatchPrefix(ctx context.Context, prefix string, options WatchOptions) (*Watcher, error) {
	return c.watch(ctx, "/v1/events?prefix="+url.QueryEscape(prefix), options)
}

func (c *Client) watch(ctx context.Context, path string, options WatchOptions) (*Watcher, error) {
	if options.IdleTimeout < 0 {
		return nil, errors.New("lockbroker: IdleTimeout must not be negative")
	}
	idle := options.IdleTimeout
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{client: c, path: path, idle: idle, ctx: ctx, cancel: cancel,
		events: make(chan Event), done: make(chan struct{}), lastID: options.LastEventID}
	go w.run()
	return w, nil
}

// Next waits for the next event. It returns ErrWatchClosed after Close (or the
// end of the ctx given to Watch), or the error that ended the watch.
func (w *Watcher) Next() (Event, error) {
	select {
	case event := <-w.events:
		return event, nil
	case <-w.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		return nil, w.err
	}
}

// Close ends the watch and its connection; Next then returns ErrWatchClosed.
func (w *Watcher) Close() error {
	w.cancel()
	<-w.done
	return nil
}

// LastEventID is the id of the last event received (or resumed after); pass
// it as WatchOptions.LastEventID to resume later.
func (w *Watcher) LastEventID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastID
}

func (w *Watcher) setLastID(id string) {
	w.mu.Lock()
	w.lastID = id
	w.mu.Unlock()
}

func (w *Watcher) run() {
	defer close(w.done)
	backoff := newBackoff(reconnectFirst)
	var err error
	for {
		var delivered bool
		var retryAfter time.Duration
		delivered, retryAfter, err = w.connect(backoff)
		if w.ctx.Err() != nil {
			err = ErrWatchClosed
			break
		}
		if err != nil && !retryable(err) {
			break
		}
		if delivered {
			backoff.reset()
		}
		pause := backoff.next(retryAfter)
		select {
		case <-w.ctx.Done():
		case <-time.After(pause):
		}
		if w.ctx.Err() != nil {
			err = ErrWatchClosed
			break
		}
	}
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// connect reads one connection of the stream until it ends. It says whether it
// delivered anything, the answer's Retry-After, and why it ended (nil: the
// broker ended the stream).
func (w *Watcher) connect(backoff *backoff) (bool, time.Duration, error) {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, w.client.base+w.path, nil)
	if err != nil {
		return false, 0, err
	}
	request.Header.Set("Accept", "text/event-stream")
	request.Header.Set("Cache-Control", "no-cache")
	request.Header.Set("User-Agent", "lockbroker-go/"+Version)
	if w.client.apiKey != "" {
		request.Header.Set("Authorization", "Bearer "+w.client.apiKey)
	}
	lastID := w.LastEventID()
	if lastID != "" {
		request.Header.Set("Last-Event-ID", lastID)
	}
	// The answer's headers must come within the client's timeout, and then
	// something (a keep-alive at least) within every idle timeout.
	silence := time.AfterFunc(w.client.timeout, cancel)
	defer silence.Stop()
	response, err := w.client.http.Do(request)
	if err != nil {
		return false, 0, transportError(w.client.base, unwrapURLError(err))
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(response.Body, maxAnswer))
		var wrapped struct {
			Error *errorBody `json:"error"`
		}
		_ = json.Unmarshal(raw, &wrapped)
		err := errorFromAnswer(response.StatusCode, wrapped.Error, response.Header.Get("Retry-After"))
		var broker *BrokerError
		errors.As(err, &broker)
		return false, broker.RetryAfter, err
	}
	silence.Reset(w.idle)

	// A resumed stream must not repeat what the caller already has: until a
	// state arrives (a fresh start), changes whose id is not above the one
	// resumed after are left out.
	resumeAfter, resuming := numericID(lastID)
	parser := &sseParser{lastID: lastID}
	reader := bufio.NewReaderSize(response.Body, 64<<10)
	delivered := false
	for {
		line, err := readLine(reader)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			} else {
				err = transportError(w.client.base, err)
			}
			return delivered, 0, err
		}
		silence.Reset(w.idle)
		message, err := parser.line(line)
		if err != nil {
			return delivered, 0, transportError(w.client.base, err)
		}
		if parser.retry > 0 {
			backoff.first = parser.retry
		}
		if message == nil {
			// An id in a block without data moves the last event id too.
			if n, ok := numericID(parser.lastID); parser.lastID != "" && !(resuming && ok && n <= resumeAfter) {
				w.setLastID(parser.lastID)
			}
			continue
		}
		delivered = true
		event := eventOf(message)
		if _, state := event.(*LockState); state {
			resuming = false
		} else if _, marker := event.(*StateComplete); marker {
			resuming = false
		} else if n, ok := numericID(message.id); resuming && ok && n <= resumeAfter {
			continue
		}
		w.setLastID(message.lastID)
		if event == nil {
			continue
		}
		select {
		case w.events <- event:
		case <-w.ctx.Done():
			return delivered, 0, ErrWatchClosed
		}
	}
}

// readLine reads one line, without its "\n" or "\r\n", at most maxEventBytes.
func readLine(reader *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		piece, err := reader.ReadSlice('\n')
		line = append(line, piece...)
		if len(line) > maxEventBytes {
			return nil, errEventTooLarge
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		return line, nil
	}
}

// retryable says whether opening the stream again may help: the broker was
// unreachable, busy or shutting down; not a refused request or key, nor a
// certificate this client does not trust.
func retryable(err error) bool {
	var unavailable *Unavailable
	if !errors.As(err, &unavailable) {
		return false
	}
	var authority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return !errors.As(err, &authority) && !errors.As(err, &hostname) && !errors.As(err, &invalid)
}

// backoff gives pauses that double from first up to reconnectLongest, each
// between half and all of its step, so watchers dropped together do not
// return together.
type backoff struct {
	first time.Duration
	step  int
}

func newBackoff(first time.Duration) *backoff { return &backoff{first: first} }

func (b *backoff) reset() { b.step = 0 }

// next is the next pause, never shorter than atLeast (a Retry-After).
func (b *backoff) next(atLeast time.Duration) time.Duration {
	ceiling := b.first << minInt(b.step, 16)
	if ceiling > reconnectLongest || ceiling <= 0 {
		ceiling = reconnectLongest
	}
	b.step++
	pause := time.Duration(float64(ceiling) * (0.5 + rand.Float64()/2)) //nolint:gosec // jitter
	if pause < atLeast {
		return atLeast
	}
	return pause
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}
