package lockbroker

// Leader election on one lock: a campaign (a waiting acquire, asked again until
// granted), a renewed lease for the term, and a watch that shows who leads.

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The leader helper's defaults, the same as the Python client's.
const (
	// DefaultLeaderTTL is a term's lease TTL when none is given.
	DefaultLeaderTTL = 10 * time.Second
	// DefaultLeaderMaxHold is how long a term is renewed at most.
	DefaultLeaderMaxHold = 24 * time.Hour
	// campaignWait is how long one acquire of the campaign waits.
	campaignWait = 5 * time.Minute
)

// LeaderOptions are the optional arguments of Client.Leader.
type LeaderOptions struct {
	// TTL is the term's lease TTL, renewed every TTL/3; 0 means
	// DefaultLeaderTTL. A leader that stalls is replaced within it.
	TTL time.Duration
	// Owner names this candidate to the others; "" means "host:pid".
	Owner string
	// MaxHold ends a term at the latest; 0 means DefaultLeaderMaxHold.
	MaxHold time.Duration
}

// Leader is one candidate's campaign for one term of leadership of a lock.
// Its methods are safe for concurrent use. A Leader leads at most once: after
// Lost, Resign or Stop, make a new one to campaign again.
type Leader struct {
	client  *Client
	name    string
	owner   string
	ttl     time.Duration
	maxHold time.Duration

	elected chan struct{}
	lost    chan struct{}
	done    sync.WaitGroup

	mu       sync.Mutex
	started  bool
	resigned bool
	cancel   context.CancelFunc // ends the campaign and the watch
	lease    *Lease
	err      error // why the campaign ended early
	view     leaderView
}

// Leader prepares a campaign for the lock name; Start begins it.
func (c *Client) Leader(name string, options LeaderOptions) (*Leader, error) {
	if _, err := newAcquire(name, AcquireOptions{TTL: options.TTL, Owner: options.Owner}); err != nil {
		return nil, err
	}
	if options.TTL < 0 || options.MaxHold < 0 {
		return nil, errors.New("lockbroker: TTL and MaxHold must not be negative")
	}
	l := &Leader{client: c, name: name, owner: options.Owner, ttl: options.TTL, maxHold: options.MaxHold,
		elected: make(chan struct{}), lost: make(chan struct{})}
	if l.owner == "" {
		l.owner = defaultOwner()
	}
	if l.ttl == 0 {
		l.ttl = DefaultLeaderTTL
	}
	if l.maxHold == 0 {
		l.maxHold = DefaultLeaderMaxHold
	}
	if l.maxHold < l.ttl {
		return nil, errors.New("lockbroker: MaxHold must be at least the TTL")
	}
	return l, nil
}

// Start campaigns and follows the lock's events in goroutines, and returns at
// once. The campaign sends waiting acquires until granted, pausing after busy
// answers that came at once and, growing, while the broker is unavailable; a
// refused key or request ends it (Err says why). ctx, once done, ends both.
func (l *Leader) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return errors.New("lockbroker: a Leader campaigns once; make another")
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	watch, err := l.client.Watch(ctx, l.name, WatchOptions{})
	if err != nil {
		return err
	}
	l.done.Add(2)
	go l.follow(watch)
	go l.campaign(ctx)
	return nil
}

// Elected is closed once this candidate won its term.
func (l *Leader) Elected() <-chan struct{} { return l.elected }

// Lost is closed when the term's lease was lost (taken, or run out
// unrenewed); LostReason says why. Not after Resign.
func (l *Leader) Lost() <-chan struct{} { return l.lost }

// IsLeader says whether this candidate leads now: it holds the lease, has not
// resigned or lost it, and the lease's local deadline is still ahead.
func (l *Leader) IsLeader() bool {
	l.mu.Lock()
	lease, resigned := l.lease, l.resigned
	l.mu.Unlock()
	return lease != nil && !resigned && lease.Err() == nil && lease.Remaining() > 0
}

// Term is the fence of this candidate's lease while it leads, else 0: pass it
// to what the leader writes to, which refuses smaller ones.
func (l *Leader) Term() int64 {
	if !l.IsLeader() {
		return 0
	}
	return l.lease.Fence
}

// Context is done when this candidate's term ends (lost, resigned, stopped);
// nil before it was elected. Run the leader's work with it.
func (l *Leader) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lease == nil {
		return nil
	}
	return l.lease.Context()
}

// LostReason is why Lost was closed ("lease_lost" or "expired"), else "".
func (l *Leader) LostReason() string {
	l.mu.Lock()
	lease := l.lease
	l.mu.Unlock()
	if lease == nil {
		return ""
	}
	var lost *LeaseLost
	if errors.As(lease.Err(), &lost) {
		return lost.Reason
	}
	return ""
}

// Err is why the campaign ended without a term (a refused key, say), else nil.
func (l *Leader) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Current is the current leader's owner and term as the lock's events show them
// (this candidate's own while it leads); "" and 0 when nobody leads.
func (l *Leader) Current() (owner string, term int64) {
	if l.IsLeader() {
		return l.owner, l.lease.Fence
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.view.held {
		return "", 0
	}
	return l.view.owner, l.view.term
}

// Resign stops campaigning and, while leading, releases the lease (Lost stays
// open). Following the events goes on until Stop.
func (l *Leader) Resign(ctx context.Context) error {
	l.mu.Lock()
	l.resigned = true
	lease, cancel := l.lease, l.cancel
	l.mu.Unlock()
	if lease == nil {
		if cancel != nil {
			cancel() // a campaign in progress gives up (and releases a late grant)
		}
		return nil
	}
	err := lease.Release(ctx)
	if errors.Is(err, ErrLeaseLost) {
		return nil // lost already: Lost says so
	}
	return err
}

// Stop resigns, stops following the events, and waits for the goroutines.
func (l *Leader) Stop(ctx context.Context) error {
	err := l.Resign(ctx)
	l.mu.Lock()
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	l.done.Wait()
	return err
}

func (l *Leader) follow(watch *Watcher) {
	defer l.done.Done()
	defer watch.Close()
	for {
		event, err := watch.Next()
		if err != nil {
			return
		}
		l.mu.Lock()
		l.view.apply(event)
		l.mu.Unlock()
	}
}

func (l *Leader) campaign(ctx context.Context) {
	defer l.done.Done()
	pauses := newBackoff(100 * time.Millisecond)
	for ctx.Err() == nil {
		request, _ := newAcquire(l.name, AcquireOptions{TTL: l.ttl, Wait: campaignWait, Owner: l.owner})
		started := time.Now()
		// ctx bounds the waiting acquire (Resign cancels it) and is the parent
		// of the term's Context, as for Lock.
		lease, err := l.client.keep(ctx, request, l.maxHold)
		if err == nil {
			l.won(lease)
			return
		}
		if ctx.Err() != nil {
			return
		}
		var busy *LockBusy
		var pause time.Duration
		switch {
		case errors.As(err, &busy) && time.Since(started) >= time.Second:
			pauses.reset() // a wait that ran its course: ask again at once
		case errors.As(err, &busy), errors.Is(err, ErrLeaseLost):
			pause = pauses.next(0)
		case retryable(err):
			var broker *BrokerError
			errors.As(err, &broker)
			pause = pauses.next(broker.RetryAfter)
		default:
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// won records the term, unless a resign came first (then it releases at once).
func (l *Leader) won(lease *Lease) {
	l.mu.Lock()
	resigned := l.resigned
	if !resigned {
		l.lease = lease
		close(l.elected)
	}
	l.mu.Unlock()
	if resigned {
		_ = lease.Release(context.Background())
		return
	}
	go func() {
		<-lease.ended
		if errors.Is(lease.Err(), ErrLeaseLost) {
			close(l.lost)
		}
	}()
}

// leaderView is who leads, as the lock's events show it: the exclusive
// holder's owner and fence (its term), or nobody. Terms only move forward: an
// event about an older lease than the one known changes nothing.
type leaderView struct {
	owner string
	term  int64
	held  bool
}

func (v *leaderView) apply(event Event) {
	switch e := event.(type) {
	case *LockState:
		v.held, v.owner = false, ""
		if e.Held && e.Mode == ModeExclusive {
			v.held, v.owner, v.term = true, e.Owner, e.Fence
			for _, h := range e.Holders {
				if h.Mode == ModeExclusive {
					v.owner, v.term = h.Owner, h.Fence
				}
			}
		}
	case *LockEvent:
		if e.Mode != ModeExclusive {
			return
		}
		switch {
		case (e.Type == "acquired" || e.Type == "extended") && e.Fence >= v.term:
			v.held, v.owner, v.term = true, e.Owner, e.Fence
		case e.Type != "acquired" && e.Type != "extended" && e.Fence == v.term:
			v.held, v.owner = false, ""
		}
	}
}
