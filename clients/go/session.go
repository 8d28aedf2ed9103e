package lockbroker

// Sessions: one keepalive for many leases. The single calls of the
// /v1/sessions routes, and Session, which keeps one session alive and follows
// the leases taken under it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

const sessionRoutes = "/v1/sessions"

// SessionOptions are the optional arguments of OpenSession. Durations are
// rounded to whole milliseconds on the wire.
type SessionOptions struct {
	// TTL is how long the session, and every lease under it, stays valid
	// after each keepalive; the helper sends one every TTL/3. 0 leaves the
	// broker's default (30 s unless configured otherwise).
	TTL time.Duration
	// Owner labels the session, and the leases under it that name no owner
	// of their own; "" means "host:pid".
	Owner string
	// LockDelay keeps each lock of the session unavailable that long after
	// the session expires (not after it is closed). 0 leaves the broker's
	// default; NoLockDelay asks for none.
	LockDelay time.Duration
}

// SessionRenewal is the broker's answer to a keepalive.
type SessionRenewal struct {
	ID string
	// TTL is the validity given to the session and each of its leases.
	TTL time.Duration
	// ExpiresAtMs is the session's new expiry, in Unix milliseconds of the
	// broker's clock.
	ExpiresAtMs int64
	// Validity is how long the session is sure to stay valid from when the
	// answer left the broker.
	Validity time.Duration
	// Leases counts the leases renewed with the session.
	Leases int
	// Ended names the leases that had ended (released with their token,
	// force-released, or past the maximum hold) and left the session.
	Ended []SessionLeaseRef
}

// SessionLeaseRef names a lease of a session: Name is its lock's or
// semaphore's, Space is "lock" or "semaphore".
type SessionLeaseRef struct {
	Name  string
	Space string
}

// SessionStatus is a session's state as GET /v1/sessions/{id} reports it. It
// never holds the token.
type SessionStatus struct {
	ID string
	// Open says whether the session is open now. A session that expired or
	// was closed reads false, as does an id no session had.
	Open bool
	// Owner is the holder's label, while open.
	Owner string
	// ExpiresIn is how long it stays valid without a keepalive; 0 when not
	// open.
	ExpiresIn time.Duration
	// TTL is the validity each keepalive gives, and LockDelay the lock-delay
	// of its leases; both 0 once the broker dropped the session's record (a
	// minute after it ended).
	TTL       time.Duration
	LockDelay time.Duration
	// Leases counts the leases the session holds.
	Leases int
}

// sessionAnswer is the JSON of an opened session: the one answer with the
// token.
type sessionAnswer struct {
	ID          string  `json:"id"`
	Token       string  `json:"token"`
	TTLMs       int64   `json:"ttl_ms"`
	ExpiresAtMs int64   `json:"expires_at_ms"`
	ValidityMs  int64   `json:"validity_ms"`
	LockDelayMs int64   `json:"lock_delay_ms"`
	Owner       *string `json:"owner"`
}

// renewalAnswer is the JSON of a SessionRenewal.
type renewalAnswer struct {
	ID          string `json:"id"`
	TTLMs       int64  `json:"ttl_ms"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
	ValidityMs  int64  `json:"validity_ms"`
	Leases      int    `json:"leases"`
	Ended       []struct {
		Name  string `json:"name"`
		Space string `json:"space"`
	} `json:"ended"`
}

// sessionStatusAnswer is the JSON of a SessionStatus.
type sessionStatusAnswer struct {
	ID          string  `json:"id"`
	Open        bool    `json:"open"`
	Owner       *string `json:"owner"`
	ExpiresInMs int64   `json:"expires_in_ms"`
	TTLMs       *int64  `json:"ttl_ms"`
	LockDelayMs *int64  `json:"lock_delay_ms"`
	Leases      int     `json:"leases"`
}

// sessionPath is /v1/sessions/{id}[/action] with the id escaped.
func sessionPath(id, action string) string { return routePath(sessionRoutes+"/", id, action) }

// KeepSession renews the session id, and every lease under it, to the
// session's TTL from now: one request however many leases it holds. A token
// that does not hold the session (it expired, was closed, or is another's)
// gets *SessionLost, matching ErrSessionLost. OpenSession's helper sends it
// for you.
func (c *Client) KeepSession(ctx context.Context, id, token string) (*SessionRenewal, error) {
	if id == "" {
		return nil, errors.New("lockbroker: the session id must not be empty")
	}
	var answer renewalAnswer
	body := map[string]any{"token": token}
	if err := c.call(ctx, http.MethodPost, sessionPath(id, "keepalive"), body, 0, &answer); err != nil {
		return nil, err
	}
	if answer.TTLMs <= 0 {
		return nil, &BrokerError{Status: http.StatusOK, Code: "bad_response",
			Message: "the broker's keepalive answer lacks the session's ttl_ms"}
	}
	renewal := &SessionRenewal{ID: answer.ID, TTL: millis(answer.TTLMs), ExpiresAtMs: answer.ExpiresAtMs,
		Validity: millis(answer.ValidityMs), Leases: answer.Leases}
	for _, ended := range answer.Ended {
		renewal.Ended = append(renewal.Ended, SessionLeaseRef{Name: ended.Name, Space: ended.Space})
	}
	return renewal, nil
}

// CloseSession closes the session id and releases every lease under it (no
// lock-delay applies), and returns how many leases it released. A token that
// does not hold the session gets *SessionLost; its leases then end with it at
// its TTL.
func (c *Client) CloseSession(ctx context.Context, id, token string) (int, error) {
	if id == "" {
		return 0, errors.New("lockbroker: the session id must not be empty")
	}
	var answer struct {
		Closed         bool `json:"closed"`
		LeasesReleased int  `json:"leases_released"`
	}
	body := map[string]any{"token": token}
	if err := c.call(ctx, http.MethodPost, sessionPath(id, "close"), body, 0, &answer); err != nil {
		return 0, err
	}
	if !answer.Closed {
		return 0, &BrokerError{Status: http.StatusOK, Code: "bad_response",
			Message: "the broker's close answer does not say the session is closed"}
	}
	return answer.LeasesReleased, nil
}

// SessionStatus reads the session id: whether it is open, for how long, its
// terms and how many leases it holds. It never holds the token.
func (c *Client) SessionStatus(ctx context.Context, id string) (*SessionStatus, error) {
	if id == "" {
		return nil, errors.New("lockbroker: the session id must not be empty")
	}
	var answer sessionStatusAnswer
	if err := c.call(ctx, http.MethodGet, sessionPath(id, ""), nil, 0, &answer); err != nil {
		return nil, err
	}
	status := &SessionStatus{ID: answer.ID, Open: answer.Open, Owner: deref(answer.Owner),
		ExpiresIn: millis(answer.ExpiresInMs), Leases: answer.Leases}
	if answer.TTLMs != nil {
		status.TTL = millis(*answer.TTLMs)
	}
	if answer.LockDelayMs != nil {
		status.LockDelay = millis(*answer.LockDelayMs)
	}
	return status, nil
}

// Session is an open session that keeps itself alive: a goroutine sends a
// keepalive every TTL/3, which renews the session and every lease taken under
// it. Take leases with its Acquire, AcquirePermit and AcquireAll; they are
// never extended on their own. Its methods are safe for concurrent use.
//
// The session is lost when the broker says so (409 session_lost) or when no
// keepalive succeeded before its TTL ran out by the local clock (counted from
// each keepalive's send time): then Lost is closed, Context is done, Err says
// why, and every lease taken under it is lost too (a *LeaseLost with Reason
// "session_lost"), its Context done. Close ends it and releases its leases.
//
// Printing a Session (String, GoString, any fmt verb) never shows its token.
type Session struct {
	client    *Client
	id        string
	secret    *sessionSecret
	owner     string
	ttl       time.Duration
	lockDelay time.Duration
	ctx       context.Context
	cancel    context.CancelFunc
	lost      chan struct{} // closed once lost
	ended     chan struct{} // closed once lost or closed
	stop      chan struct{} // closed by Close: no keepalive after it
	stopOnce  sync.Once
	kept      chan struct{} // closed when the keepalive goroutine returned

	mu          sync.Mutex
	deadline    time.Time // local, never later than the broker's expiry
	expiresAtMs int64
	timer       *time.Timer
	err         error    // nil while open; *SessionLost or ErrSessionClosed after
	closed      bool     // Close was called: no acquire under it any more
	leases      []*Lease // taken under it and, as last seen, not yet ended

	closeMu  sync.Mutex
	closing  bool
	closeErr error
	released int
}

// sessionSecret holds the token behind a pointer, so that even a Session
// printed field by field shows an address, never the token.
type sessionSecret struct{ token string }

// OpenSession opens a session and keeps it alive until Close:
//
//	session, err := client.OpenSession(ctx, lockbroker.SessionOptions{TTL: 10 * time.Second})
//	if err != nil { ... }
//	defer session.Close(context.Background())
//	a, err := session.Acquire(ctx, "ledger:a", lockbroker.AcquireOptions{})
//	b, err := session.Acquire(ctx, "ledger:b", lockbroker.AcquireOptions{Wait: 5 * time.Second})
//	err = work(session.Context(), a.Fence, b.Fence)
//
// ctx bounds the opening and is the parent of the session's Context, as for
// Lock: a done ctx does not stop the keepalives, Close does.
func (c *Client) OpenSession(ctx context.Context, options SessionOptions) (*Session, error) {
	if options.TTL < 0 || (options.LockDelay < 0 && options.LockDelay != NoLockDelay) {
		return nil, errors.New("lockbroker: TTL and LockDelay must not be negative")
	}
	owner := options.Owner
	if owner == "" {
		owner = defaultOwner()
	}
	body := map[string]any{"owner": owner}
	if options.TTL > 0 {
		body["ttl_ms"] = wireMillis(options.TTL)
	}
	switch {
	case options.LockDelay == NoLockDelay:
		body["lock_delay_ms"] = 0
	case options.LockDelay > 0:
		body["lock_delay_ms"] = int64(options.LockDelay / time.Millisecond)
	}
	var answer sessionAnswer
	sent := time.Now()
	if err := c.call(ctx, http.MethodPost, sessionRoutes, body, 0, &answer); err != nil {
		return nil, err
	}
	if answer.ID == "" || answer.Token == "" || answer.TTLMs <= 0 {
		return nil, &BrokerError{Status: http.StatusOK, Code: "bad_response",
			Message: "the broker's session answer lacks its id, token or ttl_ms"}
	}
	s := &Session{client: c, id: answer.ID, secret: &sessionSecret{token: answer.Token},
		owner: deref(answer.Owner), ttl: millis(answer.TTLMs), lockDelay: millis(answer.LockDelayMs),
		lost: make(chan struct{}), ended: make(chan struct{}), stop: make(chan struct{}),
		kept: make(chan struct{}), expiresAtMs: answer.ExpiresAtMs}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.deadline = sent.Add(validUntil(answer.TTLMs, answer.ValidityMs))
	s.mu.Lock()
	s.timer = time.AfterFunc(time.Until(s.deadline), s.expireIfDue)
	s.mu.Unlock()
	go s.keepAlive(sent)
	return s, nil
}

// validUntil is how long after a keepalive was sent the session is sure to
// be valid: its TTL, or less when the broker says so.
func validUntil(ttlMs, validityMs int64) time.Duration {
	if validityMs > 0 && validityMs < ttlMs {
		return millis(validityMs)
	}
	return millis(ttlMs)
}

// ID is the session's id, for its routes (not a secret).
func (s *Session) ID() string { return s.id }

// Token is the secret that keeps, closes and takes leases under the session.
// Keep it out of logs and URLs.
func (s *Session) Token() string { return s.secret.token }

// TTL is how long each keepalive keeps the session and its leases.
func (s *Session) TTL() time.Duration { return s.ttl }

// Owner is the session's label.
func (s *Session) Owner() string { return s.owner }

// LockDelay is the lock-delay of each lease under the session.
func (s *Session) LockDelay() time.Duration { return s.lockDelay }

// Context is done the moment the session is lost or closed. It is derived
// from the context given to OpenSession, so it is also done when that one is.
func (s *Session) Context() context.Context { return s.ctx }

// Lost is closed once the session is lost (not after Close).
func (s *Session) Lost() <-chan struct{} { return s.lost }

// Err is nil while the session is open; ErrSessionClosed once closed; a
// *SessionLost (matching ErrSessionLost) once lost, with Reason
// "session_lost" when the broker said so and "expired" when no keepalive
// succeeded in time.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Remaining is how long the session stays valid without another keepalive,
// by the local clock, counted from when the latest successful keepalive was
// sent. 0 once past, lost or closed.
func (s *Session) Remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0
	}
	if left := time.Until(s.deadline); left > 0 {
		return left
	}
	return 0
}

// LeasesReleased is how many leases the broker released when Close closed
// the session; 0 before that.
func (s *Session) LeasesReleased() int {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	return s.released
}

// Status reads the session's state from the broker.
func (s *Session) Status(ctx context.Context) (*SessionStatus, error) {
	return s.client.SessionStatus(ctx, s.id)
}

// String describes the session without its token.
func (s *Session) String() string {
	state := "open"
	switch err := s.Err(); {
	case errors.Is(err, ErrSessionLost):
		state = "lost"
	case err != nil:
		state = "closed"
	}
	s.mu.Lock()
	leases := len(s.leases)
	s.mu.Unlock()
	return fmt.Sprintf("session %s owner %q ttl %s %s remaining %s leases %d",
		s.id, s.owner, s.ttl, state, s.Remaining().Round(time.Millisecond), leases)
}

// GoString is String: %#v shows no token either.
func (s *Session) GoString() string { return s.String() }

// Format prints String for every verb, so no verb reaches the token.
func (s *Session) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// Acquire takes the lock name under the session, as Client.Acquire does
// (waiting up to options.Wait), with the session's TTL and lock-delay: leave
// options.TTL and LockDelay unset. The lease is renewed by the session's
// keepalives only, and ends with the session. options.Owner "" means the
// session's owner.
//
// A session known lost or closed refuses at once with a *SessionLost; so does
// the broker (409 session_lost), which also marks the session lost. A session
// holding as many leases as the broker allows gets *SessionFull.
func (s *Session) Acquire(ctx context.Context, name string, options AcquireOptions) (*Lease, error) {
	options, err := s.under(options)
	if err != nil {
		return nil, err
	}
	return s.adopt(s.client.Acquire(ctx, name, options))
}

// AcquirePermit takes one of the limit permits of the semaphore name under
// the session, as Acquire takes a lock.
func (s *Session) AcquirePermit(ctx context.Context, name string, limit int, options AcquireOptions) (*Lease, error) {
	options, err := s.under(options)
	if err != nil {
		return nil, err
	}
	return s.adopt(s.client.AcquirePermit(ctx, name, limit, options))
}

// AcquireAll takes a lease on every lock of locks, or on none, under the
// session, as Client.AcquireAll does; each is renewed by the session's
// keepalives only.
func (s *Session) AcquireAll(ctx context.Context, locks []LockAsk, options AcquireOptions) ([]*Lease, error) {
	options, err := s.under(options)
	if err != nil {
		return nil, err
	}
	leases, err := s.client.AcquireAll(ctx, locks, options)
	if err != nil {
		return nil, s.sawRefusal(err)
	}
	if err := s.follow(leases); err != nil {
		s.client.giveBack(leases)
		return nil, err
	}
	return leases, nil
}

// under is options for an acquire under the session, or why there is none.
func (s *Session) under(options AcquireOptions) (AcquireOptions, error) {
	if options.Session != "" && options.Session != s.secret.token {
		return options, errors.New("lockbroker: options.Session names another session")
	}
	if err := s.usable(); err != nil {
		return options, err
	}
	options.Session = s.secret.token
	if options.Owner == "" {
		options.Owner = s.owner
	}
	return options, nil
}

// usable is nil while leases may be taken under the session, else the
// *SessionLost that says why not.
func (s *Session) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usableLocked()
}

func (s *Session) usableLocked() error {
	var lost *SessionLost
	switch {
	case errors.As(s.err, &lost):
		return lost
	case s.err != nil || s.closed:
		return sessionLostLocally(s.id, "closed")
	}
	return nil
}

// adopt follows a lease just granted under the session (see follow); a
// grant that came after the session ended is given back, and the session's
// end returned.
func (s *Session) adopt(lease *Lease, err error) (*Lease, error) {
	if err != nil {
		return nil, s.sawRefusal(err)
	}
	if err := s.follow([]*Lease{lease}); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.client.timeout)
		defer cancel()
		_ = lease.Release(ctx)
		return nil, err
	}
	return lease, nil
}

// follow makes leases the session's: their deadlines move with its
// keepalives, and they end with it. When the session ended (or Close began)
// since they were asked for, it takes none and says why.
func (s *Session) follow(leases []*Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	for _, lease := range leases {
		lease.TTL = s.ttl
		s.leases = append(s.leases, lease)
	}
	return nil
}

// sawRefusal marks the session lost when the broker refused an acquire for
// it (409 session_lost), and returns err.
func (s *Session) sawRefusal(err error) error {
	var lost *SessionLost
	if errors.As(err, &lost) {
		s.finish(lost)
	}
	return err
}

// Close stops the keepalives, closes the session and releases every lease
// under it, and cancels Context; each lease taken under it then reports
// ErrReleased (one lost before reports its loss). LeasesReleased says how
// many the broker released.
//
// It returns a *SessionLost when the broker says the session was no longer
// open (its leases are then lost, as after any loss), and an *Unavailable when
// the broker could not be told: the session and its leases then expire at
// its TTL, when the session is marked lost. Calling it again returns the
// first call's result.
func (s *Session) Close(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.kept // no keepalive in flight or after
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closing {
		return s.closeErr
	}
	s.closing = true
	s.mu.Lock()
	s.closed = true
	var lost *SessionLost
	gone := errors.As(s.err, &lost) && lost.Reason == "session_lost"
	s.mu.Unlock()
	if gone {
		s.closeErr = lost // the broker said so: nothing to close
	} else {
		released, err := s.client.CloseSession(ctx, s.id, s.secret.token)
		switch {
		case err == nil:
			s.released = released
			s.finish(ErrSessionClosed)
		case errors.As(err, &lost):
			s.finish(lost)
		}
		s.closeErr = err
	}
	s.cancel()
	return s.closeErr
}

// keepAlive sends a keepalive every TTL/3 from the latest successful one's
// send time until Close or the loss. It retries an unreachable broker briefly,
// never past the deadline (the deadline timer then marks the session lost);
// it stops at once when the broker says the session is gone, and stops asking
// after any other refusal, letting the session run out.
func (s *Session) keepAlive(last time.Time) {
	defer close(s.kept)
	interval := s.ttl / 3
	next := last.Add(interval)
	for {
		wait := time.NewTimer(time.Until(next))
		select {
		case <-s.stop:
			wait.Stop()
			return
		case <-s.ended:
			wait.Stop()
			return
		case <-wait.C:
		}
		timeout := s.client.timeout
		if left := s.Remaining(); left < timeout {
			timeout = left
		}
		if timeout < 50*time.Millisecond {
			timeout = 50 * time.Millisecond
		}
		sent, err := s.keep(timeout)
		var unavailable *Unavailable
		switch {
		case err == nil:
			next = sent.Add(interval)
		case errors.As(err, &unavailable):
			pause := retryPause
			if half := interval / 2; half < pause {
				pause = half
			}
			if left := s.Remaining(); left < pause {
				pause = left
			}
			next = time.Now().Add(pause)
		default:
			return // lost, or a refusal that retrying will not change
		}
	}
}

// keep sends one keepalive. On success the session's deadline, and each of
// its leases', moves to the send time plus the validity given; a lease the
// answer says ended is checked on its own, and every lease is when the
// answer renewed fewer than the session holds.
func (s *Session) keep(timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sent := time.Now()
	renewal, err := s.client.KeepSession(ctx, s.id, s.secret.token)
	var lost *SessionLost
	if errors.As(err, &lost) {
		s.finish(lost)
	}
	if err != nil {
		return sent, err
	}
	s.mu.Lock()
	if s.err != nil {
		defer s.mu.Unlock()
		return sent, s.err // lost meanwhile
	}
	s.deadline = sent.Add(validUntil(renewal.TTL.Milliseconds(), renewal.Validity.Milliseconds()))
	s.expiresAtMs = renewal.ExpiresAtMs
	s.timer.Reset(time.Until(s.deadline))
	live := s.leases[:0]
	for _, lease := range s.leases {
		if lease.Err() == nil {
			live = append(live, lease)
		}
	}
	for i := len(live); i < len(s.leases); i++ {
		s.leases[i] = nil // let go of the ended ones
	}
	s.leases = live
	leases := append([]*Lease(nil), live...)
	deadline := s.deadline
	s.mu.Unlock()
	for _, lease := range leases {
		lease.keptBySession(deadline, renewal.ExpiresAtMs, sent)
	}
	// Fewer leases renewed than held: an earlier answer that named an ended
	// lease was lost on its way, and the broker has forgotten that lease
	// since, so no answer will name it again. Every lease is checked then.
	short := renewal.Leases < len(leases)
	if len(renewal.Ended) > 0 || short {
		// Off the keepalive's schedule: the checks may take a while.
		go s.checkEnded(renewal.Ended, leases, short)
	}
	return sent, nil
}

// checkEnded asks, for each lease whose name the keepalive said ended (or
// for every lease, when all is set), whether its own fence is still current
// (a name can stand for another lease of the session, taken since), and
// marks it lost when not.
func (s *Session) checkEnded(ended []SessionLeaseRef, leases []*Lease, all bool) {
	for _, lease := range leases {
		space := "lock"
		if lease.routes == semaphoreRoutes {
			space = "semaphore"
		}
		named := all
		for _, ref := range ended {
			named = named || (ref.Name == lease.Name && ref.Space == space)
		}
		if !named {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.client.timeout)
		check, err := lease.CheckFence(ctx)
		cancel()
		if err == nil && !check.Current {
			lease.endedOutsideSession()
		}
	}
}

// expireIfDue runs when the deadline timer fires: unless a keepalive moved the
// deadline meanwhile, the session is lost.
func (s *Session) expireIfDue() {
	s.mu.Lock()
	due := s.err == nil && !time.Now().Before(s.deadline)
	s.mu.Unlock()
	if due {
		s.finish(sessionLostLocally(s.id, "expired"))
	}
}

// finish records the session's first end (a *SessionLost, or
// ErrSessionClosed) and ends every lease under it the same way, before the
// session's own signals fire: whoever sees Lost or Context done finds every
// lease ended already.
func (s *Session) finish(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	s.timer.Stop()
	leases := s.leases
	s.leases = nil
	s.mu.Unlock()
	_, lost := err.(*SessionLost)
	for _, lease := range leases {
		if lost {
			lease.markLost(lostLocally(lease.Name, lease.Fence, "session_lost"))
		} else {
			lease.releasedWithSession()
		}
	}
	close(s.ended)
	if lost {
		close(s.lost)
	}
	s.cancel()
}

// keptBySession moves the deadline of a lease under a session to the
// session's, after a keepalive sent at sent renewed them both.
func (l *Lease) keptBySession(deadline time.Time, expiresAtMs int64, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil && deadline.After(l.deadline) {
		l.deadline, l.expiresAtMs, l.lastSent = deadline, expiresAtMs, sent
	}
}

// releasedWithSession ends a lease its session's close released, as its own
// Release would have: a later Release returns nil.
func (l *Lease) releasedWithSession() {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	if !l.releasing {
		l.releasing = true
		l.finish(ErrReleased)
		if lost, ok := l.Err().(*LeaseLost); ok {
			l.releaseErr = lost // lost before the close: its Release says so
		}
	}
	l.cancel()
}

// endedOutsideSession marks lost a lease under a session that the broker
// says ended while the session lives: released with its token elsewhere,
// force-released, or past the maximum hold. A Release of its own in flight
// or done is no loss.
func (l *Lease) endedOutsideSession() {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	if l.releasing {
		return
	}
	l.markLost(&LeaseLost{Reason: "lease_lost", BrokerError: BrokerError{
		Code: "lease_lost",
		Message: fmt.Sprintf("the lease on %q (fence %d) ended outside its session (force-released, released "+
			"elsewhere, or past the maximum hold); another holder may already be running, so treat the "+
			"work as possibly duplicated", l.Name, l.Fence),
	}})
}
