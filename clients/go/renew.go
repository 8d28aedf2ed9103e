package lockbroker

// The renewer that Lock starts: one goroutine per lease.

import (
	"context"
	"errors"
	"time"
)

// retryPause is the longest pause between renewal retries while the broker
// cannot be reached.
const retryPause = time.Second

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
			return // max hold: the deadline timer ends the lease
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
			// max_hold_exceeded, or a refusal that retrying will not change:
			// the deadline timer ends the lease.
			return
		}
	}
}
