package lockbroker

// Several locks at once: AcquireAll takes a lease on every lock named or on
// none, in one request, and ReleaseAll gives several leases back in one;
// LockAll keeps them, renewed, as a LeaseSet with one Context for the set.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"
)

const (
	acquireAllPath = lockRoutes + "acquire-all"
	releaseAllPath = lockRoutes + "release-all"
)

// LockAsk is one lock of AcquireAll: its name, and whether its lease is
// shared rather than exclusive.
type LockAsk struct {
	Name   string
	Shared bool
}

// ReleaseResult is what ReleaseAll made of one lease: Err nil when it was
// released (Fence is its fence), else the error its own Release would return
// (an error matching ErrLeaseLost for a lease that expired or was taken).
type ReleaseResult struct {
	Name  string
	Fence int64
	Err   error
}

// AcquireAll takes a lease on every lock of locks, or on none, in one request:
// the leases come back in the order asked, each an ordinary *Lease with its
// own token and fence, extended and released on its own or with ReleaseAll.
// Nothing renews them.
//
// options apply to every lease as to a single Acquire, with its retry rule: a
// busy answer is asked again with the same RequestID until options.Wait is
// over, and the broker holds none of the locks while it waits. Leave Shared
// and Fair unset: each LockAsk says Shared, and the broker has no fair queue
// over several locks. A *LockBusy names the busy lock in Lock. A name given
// twice is an error without asking (the broker would answer one lease at both
// places, which two *Lease values cannot both own); no locks are no leases.
func (c *Client) AcquireAll(ctx context.Context, locks []LockAsk, options AcquireOptions) ([]*Lease, error) {
	if options.Shared || options.Fair {
		return nil, fmt.Errorf("lockbroker: AcquireAll takes Shared from each LockAsk and has no Fair")
	}
	if len(locks) == 0 {
		return nil, nil
	}
	asks := make([]map[string]any, len(locks))
	for i, ask := range locks {
		if ask.Name == "" {
			return nil, fmt.Errorf("lockbroker: the name of locks[%d] must not be empty", i)
		}
		for _, earlier := range locks[:i] {
			if earlier.Name == ask.Name {
				return nil, fmt.Errorf("lockbroker: lock %q is named twice (locks[%d])", ask.Name, i)
			}
		}
		asks[i] = map[string]any{"name": ask.Name}
		if ask.Shared {
			asks[i]["mode"] = ModeShared // an exclusive lease is the default: no mode
		}
	}
	r, err := newAcquire(locks[0].Name, options)
	if err != nil {
		return nil, err
	}
	giveUpAt := time.Now().Add(r.wait)
	for {
		left := time.Until(giveUpAt)
		if left < 0 {
			left = 0
		}
		body := r.body(left)
		body["locks"] = asks
		var answer struct {
			Leases []leaseAnswer `json:"leases"`
		}
		sent := time.Now()
		err := c.callKeyed(ctx, http.MethodPost, acquireAllPath, body, left, r.requestID, &answer)
		if err == nil {
			return c.startAll(ctx, r, locks, answer.Leases, sent)
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

// startAll makes the leases of a grant sent at sent, as a single acquire makes
// its one lease.
func (c *Client) startAll(ctx context.Context, r *acquireRequest, locks []LockAsk,
	granted []leaseAnswer, sent time.Time) ([]*Lease, error) {
	leases := make([]*Lease, len(granted))
	for i := range granted {
		one := *r
		if i < len(locks) {
			one.shared = locks[i].Shared
		}
		leases[i] = newLease(ctx, c, &one, &granted[i], sent)
	}
	asked := len(granted) == len(locks)
	for i := 0; asked && i < len(locks); i++ {
		asked = granted[i].Name == locks[i].Name && granted[i].Token != ""
	}
	if !asked {
		c.giveBack(leases)
		return nil, &BrokerError{Code: "bad_response",
			Message: "acquire-all answered other locks than asked for, or a lease without its token"}
	}
	if r.session != "" {
		return leases, nil // their session's keepalives renew them, and tell their end
	}
	// A grant that waited: bound each deadline by an extend sent now.
	if time.Since(sent) > r.ttl/resyncShare {
		for _, lease := range leases {
			if err := lease.resync(ctx); err != nil {
				c.giveBack(leases)
				return nil, err
			}
		}
	}
	for _, lease := range leases {
		lease.arm()
	}
	return leases, nil
}

// giveBack releases the leases of a grant that cannot be returned, rather
// than leave them held until they expire. An entry without a name or token
// (an answer that is not the broker's) is left out: the broker would refuse
// the whole release-all for it, and give back none of the others.
func (c *Client) giveBack(leases []*Lease) {
	whole := make([]*Lease, 0, len(leases))
	for _, lease := range leases {
		if lease.Name != "" && lease.token != "" {
			whole = append(whole, lease)
		}
	}
	if len(whole) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	_, _ = c.ReleaseAll(ctx, whole)
}

// LockAll takes every lock of locks, or none, as AcquireAll does, and keeps
// them until Release: each lease is renewed as Lock renews one, every TTL/3,
// never past MaxHold from the grant. The set's Context is done the moment any
// lease is lost, since the work then no longer holds every lock it asked for;
// Err says which. Always call Release, which gives every lease back with one
// release-all:
//
//	leases, err := client.LockAll(ctx, []lockbroker.LockAsk{{Name: "account:17"}, {Name: "account:42"}},
//		lockbroker.LockOptions{Wait: 10 * time.Second})
//	if err != nil { ... }
//	defer leases.Release(context.Background())
//	err = transfer(leases.Context(), leases.Leases[0].Fence, leases.Leases[1].Fence)
//
// Shared goes on each LockAsk: options.Shared and Fair are refused. ctx bounds
// the acquire and is the parent of the set's Context, as for Lock.
func (c *Client) LockAll(ctx context.Context, locks []LockAsk, options LockOptions) (*LeaseSet, error) {
	ttl, maxHold := options.TTL, options.MaxHold
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if maxHold == 0 {
		maxHold = DefaultMaxHold
	}
	if maxHold < ttl {
		return nil, fmt.Errorf("lockbroker: MaxHold (%s) must be at least the TTL (%s)", maxHold, ttl)
	}
	leases, err := c.AcquireAll(ctx, locks, AcquireOptions{TTL: options.TTL, Wait: options.Wait,
		Owner: options.Owner, LockDelay: options.LockDelay, Fair: options.Fair, Shared: options.Shared})
	if err != nil {
		return nil, err
	}
	set := &LeaseSet{Leases: leases, client: c}
	set.ctx, set.cancel = context.WithCancel(ctx)
	for _, lease := range leases {
		lease.whenLost(set.lost)
		lease.startRenewing(maxHold)
	}
	return set, nil
}

// LeaseSet is the leases of one LockAll, renewed together, with one Context
// for the set. Its methods are safe for concurrent use.
type LeaseSet struct {
	// Leases are the leases, in the order asked: each an ordinary *Lease with
	// its own Fence, Context and Err.
	Leases []*Lease

	client  *Client
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	err     error // nil while every lease is held; the first loss, or ErrReleased
	release sync.Once
	result  error
}

// Context is done the moment any lease of the set is lost (the broker said
// so, or it ran out without a renewal), or the set is released. Start the
// work that needs every lock with it. It is derived from the context given to
// LockAll, so it is also done when that one is.
func (s *LeaseSet) Context() context.Context { return s.ctx }

// Err is nil while every lease is held; the first loss (a *LeaseLost naming
// its lock, matching ErrLeaseLost) once one is lost; ErrReleased once the set
// was released with none lost. A lease released on its own is no loss.
func (s *LeaseSet) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Release stops every renewer, waits for the extends in flight, gives every
// lease back with one ReleaseAll, and cancels Context. It returns an error
// matching ErrLeaseLost when a lease was lost while held (the first lost, else
// the first in the order asked), an *Unavailable when the broker could not be
// told (the leases then expire on their own), else nil. Calling it again
// returns the first call's result.
func (s *LeaseSet) Release(ctx context.Context) error {
	s.release.Do(func() {
		s.result = s.releaseAll(ctx)
		s.finish(ErrReleased)
		s.cancel()
	})
	return s.result
}

func (s *LeaseSet) releaseAll(ctx context.Context) error {
	if len(s.Leases) == 0 {
		return nil
	}
	results, err := s.client.ReleaseAll(ctx, s.Leases)
	lost := s.Err() // the first loss, if any, is the one to report
	if err != nil {
		if lost != nil {
			return lost
		}
		return err
	}
	var first error
	for _, result := range results {
		if errors.Is(result.Err, ErrLeaseLost) {
			if lost != nil {
				return lost
			}
			return result.Err
		}
		if first == nil {
			first = result.Err
		}
	}
	return first
}

// lost records the set's first loss and cancels Context.
func (s *LeaseSet) lost(lost *LeaseLost) {
	s.finish(lost)
	s.cancel()
}

func (s *LeaseSet) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// ReleaseAll gives back every lease of leases (lock leases of this client's
// broker) in one request, and returns what became of each, in the order
// given, as its own Release would have it. Each lease ends as after its own
// Release: renewing stops, Context is cancelled, and Err is ErrReleased, or
// the loss when the broker no longer had it. A lease the broker had already
// called lost, or one already released, is not asked about again: its result
// is its own Release's.
//
// The error is for the request as a whole (no answer, or a refusal): every
// lease asked about then ends as after its own Release failing the same way.
func (c *Client) ReleaseAll(ctx context.Context, leases []*Lease) ([]ReleaseResult, error) {
	for _, lease := range leases {
		if lease.routes != lockRoutes {
			return nil, fmt.Errorf("lockbroker: ReleaseAll gives back lock leases, not the permit on %q", lease.Name)
		}
	}
	// Each lease's release lock, taken in one order (by token) so that two
	// ReleaseAll calls over the same leases cannot wait on each other.
	distinct := map[*Lease]bool{}
	var locked []*Lease
	for _, lease := range leases {
		if !distinct[lease] {
			distinct[lease] = true
			locked = append(locked, lease)
		}
	}
	sort.Slice(locked, func(i, j int) bool { return locked[i].token < locked[j].token })
	for _, lease := range locked {
		lease.stopRenewing()
		lease.releaseMu.Lock()
		defer lease.releaseMu.Unlock()
	}

	var asked []*Lease
	knownLost := map[*Lease]*LeaseLost{}
	for _, lease := range locked {
		if lease.releasing {
			continue // its first release's result stands
		}
		lease.releasing = true
		lost, gone := lease.lostBeforeRelease()
		if gone {
			lease.releaseErr = lost
			lease.cancel()
			continue
		}
		knownLost[lease] = lost
		asked = append(asked, lease)
	}
	if len(asked) > 0 {
		answers, err := c.releaseAll(ctx, asked)
		for i, lease := range asked {
			one := err
			if err == nil {
				one = answers[i].err()
			}
			lease.releaseErr = lease.settleRelease(nil, one, knownLost[lease])
			lease.cancel()
		}
		if err != nil {
			return nil, err
		}
	}
	results := make([]ReleaseResult, len(leases))
	for i, lease := range leases {
		results[i] = ReleaseResult{Name: lease.Name, Fence: lease.Fence, Err: lease.releaseErr}
	}
	return results, nil
}

// releaseAllResult is one lease's result in a release-all answer.
type releaseAllResult struct {
	Name     string     `json:"name"`
	Released bool       `json:"released"`
	Fence    int64      `json:"fence"`
	Error    *errorBody `json:"error"`
}

// err is nil for a released lease, else the error its own release would get.
func (r *releaseAllResult) err() error {
	switch {
	case r.Released:
		return nil
	case r.Error != nil:
		return errorFromAnswer(0, r.Error, "")
	}
	return &BrokerError{Code: "bad_response",
		Message: fmt.Sprintf("release-all said lock %q was not released, without why", r.Name)}
}

// releaseAll is POST /v1/locks/release-all for leases, its answer checked to
// be about them, in order.
func (c *Client) releaseAll(ctx context.Context, leases []*Lease) ([]releaseAllResult, error) {
	refs := make([]map[string]string, len(leases))
	for i, lease := range leases {
		refs[i] = map[string]string{"name": lease.Name, "token": lease.token}
	}
	var answer struct {
		Results []releaseAllResult `json:"results"`
	}
	if err := c.call(ctx, http.MethodPost, releaseAllPath, map[string]any{"leases": refs}, 0, &answer); err != nil {
		return nil, err
	}
	asked := len(answer.Results) == len(leases)
	for i := 0; asked && i < len(leases); i++ {
		asked = answer.Results[i].Name == leases[i].Name
	}
	if !asked {
		return nil, &BrokerError{Code: "bad_response",
			Message: "release-all answered other leases than asked for"}
	}
	return answer.Results, nil
}
