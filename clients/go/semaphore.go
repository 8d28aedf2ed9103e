package lockbroker

// Semaphores: up to a limit of permits at once, each a lease of its own on the
// /v1/semaphores routes.

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Semaphore takes one of the limit permits of the semaphore name and keeps it
// until Release, as Lock keeps a lock: renewed every TTL/3, never past MaxHold,
// its Context done once lost. options.Shared does not apply. A full semaphore
// after Wait gives *LockBusy (with Holders and Limit); permits held under
// another limit give *LimitConflict, whose Limit is the one in force.
func (c *Client) Semaphore(ctx context.Context, name string, limit int, options LockOptions) (*Lease, error) {
	request, err := newPermitAcquire(name, limit, AcquireOptions{TTL: options.TTL, Wait: options.Wait,
		Owner: options.Owner, LockDelay: options.LockDelay, Fair: options.Fair, Shared: options.Shared})
	if err != nil {
		return nil, err
	}
	return c.keep(ctx, request, options.MaxHold)
}

// AcquirePermit takes one permit of the semaphore name, as Acquire takes a
// lock: nothing renews it. Its Extend and Release go to the semaphore's routes.
func (c *Client) AcquirePermit(ctx context.Context, name string, limit int, options AcquireOptions) (*Lease, error) {
	request, err := newPermitAcquire(name, limit, options)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, request)
}

func newPermitAcquire(name string, limit int, options AcquireOptions) (*acquireRequest, error) {
	if limit < 1 {
		return nil, errors.New("lockbroker: a semaphore's limit must be at least 1")
	}
	if options.Shared {
		return nil, errors.New("lockbroker: a permit cannot be shared")
	}
	request, err := newAcquire(name, options)
	if err != nil {
		return nil, err
	}
	request.limit = limit
	return request, nil
}

// ExtendPermit sets the remaining TTL of the permit token holds to ttl. A lock's
// token is refused here (*InvalidRequest, field token).
func (c *Client) ExtendPermit(ctx context.Context, name, token string, ttl time.Duration) (*Renewal, error) {
	return c.extendOn(ctx, semaphoreRoutes, name, token, ttl)
}

// ReleasePermit gives the permit token holds back and returns its fence.
func (c *Client) ReleasePermit(ctx context.Context, name, token string) (int64, error) {
	answer, err := c.release(ctx, semaphoreRoutes, name, token)
	if err != nil {
		return 0, err
	}
	return answer.Fence, nil
}

// SemaphoreStatus reads the semaphore's state (limit, permits held, holders).
func (c *Client) SemaphoreStatus(ctx context.Context, name string) (*SemaphoreStatus, error) {
	var answer semaphoreAnswer
	if err := c.call(ctx, http.MethodGet, routePath(semaphoreRoutes, name, ""), nil, 0, &answer); err != nil {
		return nil, err
	}
	return answer.status(), nil
}
