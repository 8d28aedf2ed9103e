package lockbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is a granted lease: Fence for the protected resource, Token (secret)
// to extend and release it, and Context, done once the lease is lost or
// released. Its methods are safe for concurrent use.
type Lease struct {
	// Name is the lock's name.
	Name string
	// Fence is larger than every fence issued before for this lock: pass it to
	// what you write to, so that a write from a stale holder is refused.
	Fence int64
	// Owner is the holder's label.
	Owner string
	// TTL is the validity asked for at each renewal.
	TTL time.Duration
	// Mode is ModeExclusive or ModeShared for a lock's lease, ModePermit for a
	// semaphore's permit.
	Mode string
	// Limit is the semaphore's limit the permit is held under; 0 for a lock.
	Limit int

	client       *Client
	routes       string // lockRoutes or semaphoreRoutes: where extend and release go
	token        string
	underSession bool // held under a session: renewed by its keepalives, never extended alone
	grantedAt    time.Time
	ctx          context.Context
	cancel       context.CancelFunc

	mu          sync.Mutex
	deadline    time.Time // local, never later than the broker's expiry
	expiresAtMs int64
	lastSent    time.Time // when the latest successful grant or extend was sent
	timer       *time.Timer
	err         error         // nil while held; *LeaseLost or ErrReleased after
	ended       chan struct{} // closed when err is set
	acked       *bool         // the release's "acknowledged", once released

	renewing   bool
	stopRenew  chan struct{}
	renewDone  chan struct{}
	stopOnce   sync.Once
	releaseMu  sync.Mutex
	releaseErr error
	releasing  bool
	onLost     func(*LeaseLost) // told of the loss once it is lost (a LeaseSet's); under mu
}

func newLease(ctx context.Context, c *Client, r *acquireRequest, answer *leaseAnswer, sent time.Time) *Lease {
	leaseCtx, cancel := context.WithCancel(ctx)
	ttl := r.ttl
	if r.session != "" {
		ttl = millis(answer.TTLMs) // what was left of the session's
	}
	return &Lease{
		Name: answer.Name, Fence: answer.Fence, Owner: answer.owner(), TTL: ttl,
		Mode: r.mode(), Limit: answer.Limit, routes: r.routes(), underSession: r.session != "",
		client: c, token: answer.Token, grantedAt: sent, ctx: leaseCtx, cancel: cancel,
		ended:    make(chan struct{}),
		deadline: sent.Add(millis(answer.TTLMs)), expiresAtMs: answer.ExpiresAtMs, lastSent: sent,
	}
}

// arm starts the timer that marks the lease expired at its deadline (at once
// if that has passed).
func (l *Lease) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil && l.err == nil {
		l.timer = time.AfterFunc(time.Until(l.deadline), l.expireIfDue)
	}
}

// Token is the secret that extends and releases the lease. Keep it out of logs
// and URLs.
func (l *Lease) Token() string { return l.token }

// Context is done the moment the lease is lost (the broker said so, or it ran
// out without a renewal) or released. Start the work that needs the lock with
// it, so that work stops when the lock is gone. It is derived from the context
// given to Lock or Acquire, so it is also done when that one is.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held; ErrReleased once released; an error
// matching ErrLeaseLost (a *LeaseLost, with the reason) once lost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Remaining is how long the lease stays valid unless renewed, by the local
// clock, counted from when the request that granted or last extended it was
// sent (so never longer than the broker's own count). 0 once past, lost or
// released.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0
	}
	if left := time.Until(l.deadline); left > 0 {
		return left
	}
	return 0
}

// ReleaseAcknowledged says, once Release succeeded, whether as many Redis
// replicas as the broker waits for (LOCKBROKER_REDIS_MIN_REPLICAS_ACKED above
// 0) acknowledged the release in time. false means the lock is free on the
// Redis primary, but a failover could bring the lease back until its TTL. It
// is nil before a successful release, and when the broker waits for no
// replicas.
func (l *Lease) ReleaseAcknowledged() *bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acked == nil {
		return nil
	}
	acked := *l.acked
	return &acked
}

// ExpiresAtMs is the broker's expiry, in Unix milliseconds of its clock.
func (l *Lease) ExpiresAtMs() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAtMs
}

// GoString is String: %#v shows no token either.
func (l *Lease) GoString() string { return l.String() }

// String describes the lease without its token.
func (l *Lease) String() string {
	state := "held"
	switch err := l.Err(); {
	case errors.Is(err, ErrLeaseLost):
		state = "lost"
	case err != nil:
		state = "released"
	}
	return fmt.Sprintf("%s lease on %q fence %d owner %q %s remaining %s",
		l.Mode, l.Name, l.Fence, l.Owner, state, l.Remaining().Round(time.Millisecond))
}

// Extend sets the remaining TTL to ttl (0: the lease's TTL). A lease already
// lost or released is never extended: that returns its error at once. A lease
// under a session is refused: its session's keepalives renew it.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < 0 {
		return errors.New("lockbroker: ttl must not be negative")
	}
	if err := l.Err(); err != nil {
		return err
	}
	if l.underSession {
		return errors.New("lockbroker: a lease under a session is renewed by the session's keepalives, " +
			"not extended on its own")
	}
	if ttl == 0 {
		ttl = l.TTL
	}
	_, err := l.extend(ctx, ttl, 0)
	return err
}

// Release gives the lock back, after stopping the renewer and waiting for an
// extend in flight (so no extend follows the release), and cancels Context.
// ReleaseAcknowledged then says whether Redis replicas acknowledged it.
//
// It returns an error matching ErrLeaseLost when the lease was lost while held:
// another holder may have run, so treat the work as possibly duplicated. It
// returns an *Unavailable when the broker could not be told; the lease then
// expires on its own, and no one else held the lock meanwhile. Calling it again
// returns the first call's result.
func (l *Lease) Release(ctx context.Context) error {
	l.stopRenewing()
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	if l.releasing {
		return l.releaseErr
	}
	l.releasing = true
	l.releaseErr = l.release(ctx)
	l.cancel()
	return l.releaseErr
}

func (l *Lease) release(ctx context.Context) error {
	lost, gone := l.lostBeforeRelease()
	if gone {
		return lost
	}
	answer, err := l.client.release(ctx, l.routes, l.Name, l.token)
	var acked *bool
	if answer != nil {
		acked = answer.Acknowledged
	}
	return l.settleRelease(acked, err, lost)
}

// lostBeforeRelease is the lease's loss, if it is lost, and whether the
// broker already said it is gone, so that a release has nothing to ask.
func (l *Lease) lostBeforeRelease() (lost *LeaseLost, gone bool) {
	l.mu.Lock()
	lost, _ = l.err.(*LeaseLost)
	l.mu.Unlock()
	return lost, lost != nil && lost.Reason == "lease_lost"
}

// settleRelease ends the lease as the broker's answer to its release says
// (err nil: released), and returns the release's result; lost is its loss
// known before the release.
func (l *Lease) settleRelease(acked *bool, err error, lost *LeaseLost) error {
	var brokerLost *LeaseLost
	switch {
	case err == nil:
		// The broker still had the lease: even a lease this client had given
		// up on by its (conservative) clock was never held by anyone else.
		l.mu.Lock()
		l.acked = acked
		l.mu.Unlock()
		l.finish(ErrReleased)
		return nil
	case errors.As(err, &brokerLost):
		l.markLost(brokerLost)
		return brokerLost
	case lost != nil:
		return lost
	default:
		return err
	}
}

// extend renews with the broker; timeout 0 means the client's.
func (l *Lease) extend(ctx context.Context, ttl, timeout time.Duration) (time.Time, error) {
	if err := l.Err(); err != nil {
		return time.Time{}, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var answer leaseAnswer
	sent := time.Now()
	err := l.client.extend(ctx, l.routes, l.Name, l.token, ttl, &answer)
	var lost *LeaseLost
	if errors.As(err, &lost) {
		l.markLost(lost)
	}
	if err != nil {
		return sent, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return sent, l.err // lost or released while the extend was in flight
	}
	l.renewedLocked(&answer, sent)
	return sent, nil
}

// renewedLocked moves the deadline to sent + the answer's TTL and re-arms the
// timer that marks the lease expired when that passes.
func (l *Lease) renewedLocked(answer *leaseAnswer, sent time.Time) {
	l.deadline = sent.Add(millis(answer.TTLMs))
	l.expiresAtMs = answer.ExpiresAtMs
	l.lastSent = sent
	if l.timer != nil {
		l.timer.Reset(time.Until(l.deadline))
	}
}

// expireIfDue runs when the deadline timer fires: unless an extend moved the
// deadline meanwhile, the lease is lost.
func (l *Lease) expireIfDue() {
	l.mu.Lock()
	due := l.err == nil && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if due {
		l.markLost(lostLocally(l.Name, l.Fence, "expired"))
	}
}

// markLost records the first loss and cancels Context.
func (l *Lease) markLost(lost *LeaseLost) { l.finish(lost) }

func (l *Lease) finish(err error) {
	l.mu.Lock()
	first := l.err == nil
	if first {
		l.err = err
		close(l.ended)
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	onLost := l.onLost
	l.mu.Unlock()
	l.cancel()
	if lost, ok := err.(*LeaseLost); first && ok && onLost != nil {
		onLost(lost)
	}
}

// whenLost has tell called with the lease's loss once it is lost, at once if
// it already is.
func (l *Lease) whenLost(tell func(*LeaseLost)) {
	l.mu.Lock()
	l.onLost = tell
	lost, _ := l.err.(*LeaseLost)
	l.mu.Unlock()
	if lost != nil {
		tell(lost)
	}
}

// resync follows a grant that waited: an extend sent now bounds the local
// deadline by a request sent after the grant. A broker that cannot be reached
// (or refuses for max hold) leaves the conservative deadline from the acquire.
func (l *Lease) resync(ctx context.Context) error {
	_, err := l.extend(ctx, l.TTL, 0)
	var unavailable *Unavailable
	var maxHold *MaxHoldExceeded
	if errors.As(err, &unavailable) || errors.As(err, &maxHold) {
		return nil
	}
	return err
}
