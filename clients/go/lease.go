package lockbroker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// resyncShare: a grant that took longer than this share of the TTL to arrive
// (it waited for the lock) is followed at once by an extend, so the lease's
// local deadline counts from a request sent after the grant.
const resyncShare = 10

// retryPause is the longest pause between renewal retries while the broker
// cannot be reached.
const retryPause = time.Second

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

	client    *Client
	token     string
	grantedAt time.Time
	ctx       context.Context
	cancel    context.CancelFunc

	mu          sync.Mutex
	deadline    time.Time // local, never later than the broker's expiry
	expiresAtMs int64
	lastSent    time.Time // when the latest successful grant or extend was sent
	timer       *time.Timer
	err         error         // nil while held; *LeaseLost or ErrReleased after
	ended       chan struct{} // closed when err is set

	renewing   bool
	stopRenew  chan struct{}
	renewDone  chan struct{}
	stopOnce   sync.Once
	releaseMu  sync.Mutex
	releaseErr error
	releasing  bool
}

func newLease(ctx context.Context, c *Client, answer *leaseAnswer, sent time.Time, ttl time.Duration) *Lease {
	leaseCtx, cancel := context.WithCancel(ctx)
	l := &Lease{
		Name: answer.Name, Fence: answer.Fence, Owner: answer.owner(), TTL: ttl,
		client: c, token: answer.Token, grantedAt: sent, ctx: leaseCtx, cancel: cancel,
		ended:    make(chan struct{}),
		deadline: sent.Add(millis(answer.TTLMs)), expiresAtMs: answer.ExpiresAtMs, lastSent: sent,
	}
	return l
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

// ExpiresAtMs is the broker's expiry, in Unix milliseconds of its clock.
func (l *Lease) ExpiresAtMs() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAtMs
}

// String describes the lease without its token.
func (l *Lease) String() string {
	state := "held"
	switch err := l.Err(); {
	case errors.Is(err, ErrLeaseLost):
		state = "lost"
	case err != nil:
		state = "released"
	}
	return fmt.Sprintf("lease on %q fence %d owner %q %s remaining %s",
		l.Name, l.Fence, l.Owner, state, l.Remaining().Round(time.Millisecond))
}

// Extend sets the remaining TTL to ttl (0: the lease's TTL). A lease already
// lost or released is never extended: that returns its error at once.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < 0 {
		return errors.New("lockbroker: ttl must not be negative")
	}
	if ttl == 0 {
		ttl = l.TTL
	}
	_, err := l.extend(ctx, ttl, 0)
	return err
}

// Release gives the lock back, after stopping the renewer and waiting for an
// extend in flight (so no extend follows the release), and cancels Context.
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
	l.mu.Lock()
	lost, _ := l.err.(*LeaseLost)
	l.mu.Unlock()
	if lost != nil && lost.Reason == "lease_lost" {
		return lost // the broker already said it is gone: nothing to release
	}
	_, err := l.client.Release(ctx, l.Name, l.token)
	var brokerLost *LeaseLost
	switch {
	case err == nil:
		// The broker still had the lease: even a lease this client had given
		// up on by its (conservative) clock was never held by anyone else.
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
	err := l.client.extend(ctx, l.Name, l.token, ttl, &answer)
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
	if l.err == nil {
		l.err = err
		close(l.ended)
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	l.mu.Unlock()
	l.cancel()
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

// -- the renewer ------------------------------------------------------------------

// startRenewing runs the renewer until Release, the loss of the lease, or
// maxHold from the grant.
func (l *Lease) startRenewing(maxHold time.Duration) {
	l.renewing = true
	l.stopRenew = make(chan struct{})
	l.renewDone = make(chan struct{})
	go l.renew(maxHold)
}

func (l *Lease) stopRenewing() {
	if !l.renewing {
		return
	}
	l.stopOnce.Do(func() { close(l.stopRenew) })
	<-l.renewDone
}

// renew extends the lease every TTL/3. It never asks for validity past
// grantedAt + maxHold, so a hung worker loses the lock instead of keeping it;
// it retries an unreachable broker briefly, never past the deadline (the
// deadline timer then marks the lease lost); it ends at once when the broker
// says the lease is gone, and stops asking after any other refusal, letting the
// lease run out.
func (l *Lease) renew(maxHold time.Duration) {
	defer close(l.renewDone)
	holdDeadline := l.grantedAt.Add(maxHold)
	interval := l.TTL / 3
	l.mu.Lock()
	next := l.lastSent.Add(interval)
	l.mu.Unlock()
	for {
		// A done parent context does not stop renewing: the caller still holds
		// the lease until Release.
		wait := time.NewTimer(time.Until(next))
		select {
		case <-l.stopRenew:
			wait.Stop()
			return
		case <-l.ended:
			wait.Stop()
			return
		case <-wait.C:
		}
		room := time.Until(holdDeadline)
		if room < time.Millisecond {
			l.waitForTheEnd() // max hold: let the lease run out
			return
		}
		ttl := l.TTL
		if room < ttl {
			ttl = room
		}
		timeout := l.client.timeout
		if left := l.Remaining(); left < timeout {
			timeout = left
		}
		if timeout < 50*time.Millisecond {
			timeout = 50 * time.Millisecond
		}
		sent, err := l.extend(context.Background(), ttl, timeout)
		var unavailable *Unavailable
		switch {
		case err == nil:
			next = sent.Add(interval)
		case errors.As(err, &unavailable):
			pause := retryPause
			if half := interval / 2; half < pause {
				pause = half
			}
			if left := l.Remaining(); left < pause {
				pause = left
			}
			next = time.Now().Add(pause)
		case l.Err() != nil:
			return // lost
		default:
			// max_hold_exceeded, or a refusal that retrying will not change.
			l.waitForTheEnd()
			return
		}
	}
}

// waitForTheEnd waits, renewing no more, until Release or the deadline timer
// marks the lease lost.
func (l *Lease) waitForTheEnd() {
	select {
	case <-l.stopRenew:
	case <-l.ended:
	}
}

// -- acquiring ---------------------------------------------------------------------

// acquireRequest is one acquire, checked, with the request_id every retry of it
// carries.
type acquireRequest struct {
	name      string
	ttl       time.Duration
	wait      time.Duration
	owner     string
	requestID string
	lockDelay time.Duration
	fair      bool
}

func newAcquire(name string, o AcquireOptions) (*acquireRequest, error) {
	if name == "" {
		return nil, errors.New("lockbroker: the lock name must not be empty")
	}
	if o.TTL < 0 || o.Wait < 0 || (o.LockDelay < 0 && o.LockDelay != NoLockDelay) {
		return nil, errors.New("lockbroker: TTL, Wait and LockDelay must not be negative")
	}
	r := &acquireRequest{name: name, ttl: o.TTL, wait: o.Wait, owner: o.Owner,
		requestID: o.RequestID, lockDelay: o.LockDelay, fair: o.Fair}
	if r.ttl == 0 {
		r.ttl = DefaultTTL
	}
	if r.owner == "" {
		r.owner = defaultOwner()
	}
	if r.requestID == "" {
		r.requestID = newRequestID()
	}
	return r, nil
}

func (r *acquireRequest) body(left time.Duration) map[string]any {
	body := map[string]any{
		"ttl_ms":     wireMillis(r.ttl),
		"wait_ms":    int64(left / time.Millisecond),
		"owner":      r.owner,
		"request_id": r.requestID,
	}
	switch {
	case r.lockDelay == NoLockDelay:
		body["lock_delay_ms"] = 0
	case r.lockDelay > 0:
		body["lock_delay_ms"] = int64(r.lockDelay / time.Millisecond)
	}
	if r.fair {
		body["fair"] = true // sent only when set
	}
	return body
}

// acquire asks until granted or the wait is over. Every attempt carries the
// same request_id, so one re-sent after a lost answer gets the same lease back.
func (c *Client) acquire(ctx context.Context, r *acquireRequest) (*Lease, error) {
	giveUpAt := time.Now().Add(r.wait)
	path := lockPath(r.name, "acquire")
	for {
		left := time.Until(giveUpAt)
		if left < 0 {
			left = 0
		}
		var answer leaseAnswer
		sent := time.Now()
		err := c.callKeyed(ctx, http.MethodPost, path, r.body(left), left, r.requestID, &answer)
		if err == nil {
			lease := newLease(ctx, c, &answer, sent, r.ttl)
			// A grant that waited: its deadline counted from this send time
			// may be near or past, so bound it by an extend sent now instead.
			if time.Since(sent) > r.ttl/resyncShare {
				if err := lease.resync(ctx); err != nil {
					lease.cancel()
					return nil, err
				}
			}
			lease.arm()
			return lease, nil
		}
		pause, retry := pauseAfter(err, sent, giveUpAt)
		if !retry || ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
	}
}

// pauseAfter says whether to ask again after err, and after what pause: a busy
// answer until the wait is over (the broker caps one request's wait), an
// unavailable broker likewise, pausing as it asks.
func pauseAfter(err error, sent, giveUpAt time.Time) (time.Duration, bool) {
	now := time.Now()
	left := giveUpAt.Sub(now)
	if left <= 0 {
		return 0, false
	}
	var busy *LockBusy
	var unavailable *Unavailable
	switch {
	case errors.As(err, &busy):
		if now.Sub(sent) < 50*time.Millisecond {
			return minDuration(50*time.Millisecond, left), true // no busy loop
		}
		return 0, true
	case errors.As(err, &unavailable):
		pause := unavailable.RetryAfter
		if pause == 0 {
			pause = 500 * time.Millisecond
		}
		return minDuration(minDuration(pause, time.Second), left), true
	}
	return 0, false
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// LockOptions are the optional arguments of Lock.
type LockOptions struct {
	// TTL is the lease's validity, renewed every TTL/3; 0 means DefaultTTL.
	TTL time.Duration
	// Wait is how long to wait for a busy lock; 0 returns *LockBusy at once.
	Wait time.Duration
	// Owner labels the holder; "" means "host:pid".
	Owner string
	// MaxHold is how long the lease is renewed at most, from the grant; then
	// it runs out and Context is done. 0 means DefaultMaxHold. At least TTL.
	MaxHold time.Duration
	// LockDelay: see AcquireOptions.
	LockDelay time.Duration
	// Fair: see AcquireOptions.
	Fair bool
}

// Lock takes the lock name and keeps it until Release: a goroutine extends the
// lease every TTL/3, never past MaxHold from the grant. The lease's Context is
// done the moment the broker says the lease is gone or the lease runs out
// without a renewal (the broker unreachable, or MaxHold reached); it is never
// renewed again then. Always call Release:
//
//	lease, err := client.Lock(ctx, "nightly-report", lockbroker.LockOptions{Wait: 10 * time.Second})
//	if err != nil { ... }
//	defer lease.Release(context.Background())
//	err = writeReport(lease.Context(), lease.Fence)
//
// ctx bounds the acquire and is the parent of the lease's Context; bound the
// wait with Wait, since a ctx deadline would also end the lease's Context.
func (c *Client) Lock(ctx context.Context, name string, options LockOptions) (*Lease, error) {
	maxHold := options.MaxHold
	if maxHold == 0 {
		maxHold = DefaultMaxHold
	}
	request, err := newAcquire(name, AcquireOptions{TTL: options.TTL, Wait: options.Wait,
		Owner: options.Owner, LockDelay: options.LockDelay, Fair: options.Fair})
	if err != nil {
		return nil, err
	}
	if maxHold < request.ttl {
		return nil, fmt.Errorf("lockbroker: MaxHold (%s) must be at least the TTL (%s)", maxHold, request.ttl)
	}
	lease, err := c.acquire(ctx, request)
	if err != nil {
		return nil, err
	}
	lease.startRenewing(maxHold)
	return lease, nil
}
