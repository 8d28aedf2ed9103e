package lockbroker

// Acquiring: the checked request, the retry rule with one request_id, and Lock.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// resyncShare: a grant that took longer than a 1/resyncShare of the TTL to
// arrive (it waited for the lock) is followed at once by an extend, so the
// lease's local deadline counts from a request sent after the grant.
const resyncShare = 10

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
	shared    bool
	limit     int    // > 0: a semaphore's permit under this limit
	session   string // a session's token: the lease is held under it
}

// mode is the Lease.Mode a grant of r has.
func (r *acquireRequest) mode() string {
	switch {
	case r.limit > 0:
		return ModePermit
	case r.shared:
		return ModeShared
	}
	return ModeExclusive
}

// routes is where r and the extends and release of its lease go.
func (r *acquireRequest) routes() string {
	if r.limit > 0 {
		return semaphoreRoutes
	}
	return lockRoutes
}

func newAcquire(name string, o AcquireOptions) (*acquireRequest, error) {
	if name == "" {
		return nil, errors.New("lockbroker: the lock name must not be empty")
	}
	if o.TTL < 0 || o.Wait < 0 || (o.LockDelay < 0 && o.LockDelay != NoLockDelay) {
		return nil, errors.New("lockbroker: TTL, Wait and LockDelay must not be negative")
	}
	if o.Session != "" && (o.TTL != 0 || o.LockDelay != 0) {
		return nil, errors.New("lockbroker: a lease under a session takes its TTL and LockDelay " +
			"from the session: leave them unset")
	}
	r := &acquireRequest{name: name, ttl: o.TTL, wait: o.Wait, owner: o.Owner,
		requestID: o.RequestID, lockDelay: o.LockDelay, fair: o.Fair, shared: o.Shared,
		session: o.Session}
	if r.ttl == 0 && r.session == "" {
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
		"wait_ms":    int64(left / time.Millisecond),
		"owner":      r.owner,
		"request_id": r.requestID,
	}
	switch {
	case r.session != "":
		body["session"] = r.session // the session's TTL and lock-delay, none of the lease's own
	case r.lockDelay == NoLockDelay:
		body["ttl_ms"], body["lock_delay_ms"] = wireMillis(r.ttl), 0
	case r.lockDelay > 0:
		body["ttl_ms"], body["lock_delay_ms"] = wireMillis(r.ttl), int64(r.lockDelay/time.Millisecond)
	default:
		body["ttl_ms"] = wireMillis(r.ttl)
	}
	if r.fair {
		body["fair"] = true // sent only when set
	}
	if r.shared {
		body["mode"] = ModeShared // sent only when set, as older brokers know no mode
	}
	if r.limit > 0 {
		body["limit"] = r.limit
	}
	return body
}

// acquire asks until granted or the wait is over. Every attempt carries the
// same request_id, so one re-sent after a lost answer gets the same lease back.
func (c *Client) acquire(ctx context.Context, r *acquireRequest) (*Lease, error) {
	giveUpAt := time.Now().Add(r.wait)
	path := routePath(r.routes(), r.name, "acquire")
	for {
		left := time.Until(giveUpAt)
		if left < 0 {
			left = 0
		}
		var answer leaseAnswer
		sent := time.Now()
		err := c.callKeyed(ctx, http.MethodPost, path, r.body(left), left, r.requestID, &answer)
		if err == nil {
			lease := newLease(ctx, c, r, &answer, sent)
			if r.session != "" {
				return lease, nil // its session's keepalives renew it, and tell its end
			}
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
	// Shared: see AcquireOptions.
	Shared bool
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
	request, err := newAcquire(name, AcquireOptions{TTL: options.TTL, Wait: options.Wait,
		Owner: options.Owner, LockDelay: options.LockDelay, Fair: options.Fair, Shared: options.Shared})
	if err != nil {
		return nil, err
	}
	return c.keep(ctx, request, options.MaxHold)
}

// keep acquires for request and renews the lease until Release, the loss, or
// maxHold (0: DefaultMaxHold) from the grant.
func (c *Client) keep(ctx context.Context, request *acquireRequest, maxHold time.Duration) (*Lease, error) {
	if maxHold == 0 {
		maxHold = DefaultMaxHold
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
