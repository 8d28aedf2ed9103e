package lockbroker

// Fence checks: whether a fence is still current, asked of the broker, for a
// resource that keeps no fences of its own.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// FenceCheck is the broker's answer to a fence check (GET
// /v1/{locks,semaphores}/{name}/fence/{fence}): whether a valid lease
// (exclusive, shared or permit) carries exactly Fence now. It never holds a
// token.
//
// It can be stale by the time a resource acts on it: check, act at once, and
// keep the action shorter than ExpiresIn.
type FenceCheck struct {
	Name  string
	Fence int64
	// Current says whether a valid lease carries this fence now; false once
	// it expired (its lock-delay included), was released, force-released or
	// replaced.
	Current bool
	// Held is true when Current; otherwise whether another lease holds the
	// name.
	Held bool
	// ExpiresIn is how long the lease with this fence stays valid when
	// Current; otherwise how long the name's current lease does (0 when free).
	ExpiresIn time.Duration
}

// fenceAnswer is the JSON of a FenceCheck. Every field is required: an answer
// without one is not the broker's (a proxy's empty 200, say), and must not
// read as "not current" or "current".
type fenceAnswer struct {
	Name        *string `json:"name"`
	Fence       *int64  `json:"fence"`
	Current     *bool   `json:"current"`
	Held        *bool   `json:"held"`
	ExpiresInMs *int64  `json:"expires_in_ms"`
}

// CheckFence asks whether a valid lease of the lock name carries exactly
// fence now, for a resource that cannot store fences. The answer can be stale
// by the time the resource acts: act at once, and within ExpiresIn. A bad name,
// or a fence outside 1 to 2^53 - 1, gets *InvalidRequest with Field "name" or
// "fence". The check is a read: it renews nothing.
func (c *Client) CheckFence(ctx context.Context, name string, fence int64) (*FenceCheck, error) {
	return c.checkFenceOn(ctx, lockRoutes, name, fence)
}

// CheckSemaphoreFence asks whether a valid permit of the semaphore name
// carries exactly fence now; see CheckFence.
func (c *Client) CheckSemaphoreFence(ctx context.Context, name string, fence int64) (*FenceCheck, error) {
	return c.checkFenceOn(ctx, semaphoreRoutes, name, fence)
}

// CheckFence asks the broker whether this lease's fence is still current (a
// permit's on its semaphore). It is a read: it neither renews the lease nor
// ends its Context, which only the lease's own calls and its deadline decide.
func (l *Lease) CheckFence(ctx context.Context) (*FenceCheck, error) {
	return l.client.checkFenceOn(ctx, l.routes, l.Name, l.Fence)
}

func (c *Client) checkFenceOn(ctx context.Context, routes, name string, fence int64) (*FenceCheck, error) {
	if name == "" {
		return nil, errors.New("lockbroker: the lock name must not be empty")
	}
	var answer fenceAnswer
	// Only the name needs escaping: a fence is digits (and a sign, which the
	// broker refuses with field "fence").
	path := routePath(routes, name, "fence/"+strconv.FormatInt(fence, 10))
	if err := c.call(ctx, http.MethodGet, path, nil, 0, &answer); err != nil {
		return nil, err
	}
	if answer.Name == nil || answer.Fence == nil || answer.Current == nil || answer.Held == nil ||
		answer.ExpiresInMs == nil {
		return nil, &BrokerError{Status: http.StatusOK, Code: "bad_response",
			Message: "the broker's fence check answer lacks a required field"}
	}
	return &FenceCheck{Name: *answer.Name, Fence: *answer.Fence, Current: *answer.Current,
		Held: *answer.Held, ExpiresIn: millis(*answer.ExpiresInMs)}, nil
}
