package lockbroker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrLeaseLost matches (with errors.Is) every error that says a lease is gone:
// the broker's 409 lease_lost, and a lease this client stopped trusting because
// it ran out without a renewal. Another holder may already have run, so treat
// the work done under the lease as possibly duplicated.
var ErrLeaseLost = errors.New("lockbroker: lease lost")

// ErrReleased is returned when a lease that was already released is extended.
var ErrReleased = errors.New("lockbroker: lease already released")

// ErrSessionLost matches (with errors.Is) every error that says a session is
// gone: the broker's 409 session_lost (a *SessionLost), a session this client
// stopped trusting (no keepalive succeeded within its TTL), and the loss of a
// lease taken under a lost session (a *LeaseLost with Reason "session_lost",
// which matches ErrLeaseLost too). The broker's session_lost itself does not
// match ErrLeaseLost: refused an acquire, it granted no lease.
var ErrSessionLost = errors.New("lockbroker: session lost")

// ErrSessionClosed is a Session's Err once Close closed it.
var ErrSessionClosed = errors.New("lockbroker: session closed")

// BrokerError is a failed call: the broker's error answer ({"error": {"code",
// "message"}}), or a transport failure (Code "transport", Status 0). Every
// error type of this package unwraps to one, so
//
//	var e *lockbroker.BrokerError
//	if errors.As(err, &e) { log.Print(e.Code, e.Status) }
//
// works for all of them.
type BrokerError struct {
	// Status is the HTTP status; 0 when no answer came back.
	Status int
	// Code is the broker's stable error code (see openapi.yaml), "transport"
	// when no answer came back, or "http_<status>" for an answer without one.
	Code string
	// Message says what went wrong, for people. It never holds a token.
	Message string
	// Field names the rejected request field, for invalid_request.
	Field string
	// RetryAfter is the answer's Retry-After header (0 when absent).
	RetryAfter time.Duration

	cause error
}

func (e *BrokerError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("lockbroker: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("lockbroker: %s (%d): %s", e.Code, e.Status, e.Message)
}

// Unwrap returns the transport failure behind a "transport" error (a refused
// connection, a timeout, an untrusted certificate), nil otherwise.
func (e *BrokerError) Unwrap() error { return e.cause }

// LockBusy is 423 lock_busy: other leases (or their lock-delay) hold the lock,
// or every permit of a semaphore is taken, also after waiting.
type LockBusy struct {
	BrokerError
	// Owner is the holder's owner label ("" when it gave none).
	Owner string
	// Fence is the holder's fence.
	Fence int64
	// ExpiresIn is how long the holder's lease stays valid unless renewed.
	ExpiresIn time.Duration
	// AvailableIn is how long until the lock can be granted at the earliest
	// (expiry plus lock-delay).
	AvailableIn time.Duration
	// Holders lists every lease (or permit) in the way, at most 100; Owner,
	// Fence and AvailableIn describe the one whose end lets you try first.
	Holders []Holder
	// Limit is a semaphore's limit; 0 for a lock.
	Limit int
	// Lock is the busy lock of an AcquireAll; "" for a single acquire, which
	// names its one lock itself.
	Lock string
}

// Unwrap gives the common BrokerError.
func (e *LockBusy) Unwrap() error { return &e.BrokerError }

// LeaseLost is 409 lease_lost, or a lease this client gave up on locally. It
// matches ErrLeaseLost, and ErrSessionLost too when its session was lost.
type LeaseLost struct {
	BrokerError
	// Reason is "lease_lost" when the broker said so, "expired" when the lease
	// ran out without a renewal (broker unreachable, or max hold reached),
	// "session_lost" when the session it was taken under was lost.
	Reason string
	// ForceReleasedBy names the API key id (or "anonymous") of the operator
	// who force-released the lease, when the broker still remembers it.
	ForceReleasedBy string
}

// Unwrap gives the common BrokerError.
func (e *LeaseLost) Unwrap() error { return &e.BrokerError }

// Is makes errors.Is(err, ErrLeaseLost) true, and errors.Is(err,
// ErrSessionLost) for a lease lost with its session.
func (e *LeaseLost) Is(target error) bool {
	return target == ErrLeaseLost || (target == ErrSessionLost && e.Reason == "session_lost")
}

// SessionLost is 409 session_lost (the session is not open: it expired, was
// closed, or the token is not its own), or a session this client gave up on
// locally. It matches ErrSessionLost. Every lease under the session has ended
// or ends with it: treat the work done under them as possibly duplicated, and
// open a new session to go on.
type SessionLost struct {
	BrokerError
	// Reason is "session_lost" when the broker said so, "expired" when no
	// keepalive succeeded before the session's TTL ran out by the local
	// clock, "closed" for a Session that Close closed.
	Reason string
}

// Unwrap gives the common BrokerError.
func (e *SessionLost) Unwrap() error { return &e.BrokerError }

// Is makes errors.Is(err, ErrSessionLost) true.
func (e *SessionLost) Is(target error) bool { return target == ErrSessionLost }

// SessionFull is 409 session_full: the session holds as many leases as the
// broker lets one hold (locks.max_leases_per_session). Nothing was granted;
// release a lease of the session, or take this one under another session.
type SessionFull struct {
	BrokerError
}

// Unwrap gives the common BrokerError.
func (e *SessionFull) Unwrap() error { return &e.BrokerError }

// MaxHoldExceeded is 409 max_hold_exceeded: the broker will not extend the
// lease past its acquisition time plus the configured maximum hold.
type MaxHoldExceeded struct {
	BrokerError
	// ExpiresIn is how long the lease stays valid as it is.
	ExpiresIn time.Duration
}

// Unwrap gives the common BrokerError.
func (e *MaxHoldExceeded) Unwrap() error { return &e.BrokerError }

// LimitConflict is 409 limit_conflict: a semaphore's permits are held under
// another limit than the one asked for. Retrying with the same limit fails the
// same way; ask with Limit.
type LimitConflict struct {
	BrokerError
	// Limit is the limit in force.
	Limit int
}

// Unwrap gives the common BrokerError.
func (e *LimitConflict) Unwrap() error { return &e.BrokerError }

// Unavailable means nothing was done and trying again later is safe: the broker
// could not be reached (Code "transport"), or answered backend_unavailable,
// shutting_down, overloaded, too_many_waiters, too_many_streams, rate_limited, too_many_sessions, request_timeout,
// internal or another 5xx. RetryAfter carries the broker's Retry-After.
type Unavailable struct {
	BrokerError
}

// Unwrap gives the common BrokerError (and through it the transport failure).
func (e *Unavailable) Unwrap() error { return &e.BrokerError }

// InvalidRequest is a request the broker refused as such: invalid_request
// (Field names the field), payload_too_large, unsupported_media_type,
// uri_too_long, headers_too_large, not_found, method_not_allowed.
type InvalidRequest struct {
	BrokerError
}

// Unwrap gives the common BrokerError.
func (e *InvalidRequest) Unwrap() error { return &e.BrokerError }

// AuthError is 401 unauthorized (no API key, or an unknown one) or 403
// forbidden (the key lacks the scope, or the lock is outside its prefixes).
type AuthError struct {
	BrokerError
}

// Unwrap gives the common BrokerError.
func (e *AuthError) Unwrap() error { return &e.BrokerError }

// errorBody is the error object of a broker answer.
type errorBody struct {
	Code          string         `json:"code"`
	Message       string         `json:"message"`
	Field         string         `json:"field"`
	Owner         *string        `json:"owner"`
	Fence         int64          `json:"fence"`
	ExpiresInMs   int64          `json:"expires_in_ms"`
	AvailableInMs int64          `json:"available_in_ms"`
	Limit         int            `json:"limit"`
	Holders       []holderAnswer `json:"holders"`
	ForcedBy      string         `json:"force_released_by"`
	Lock          string         `json:"lock"`
}

// kinds is the one table from error code to error type.
var kinds = map[string]string{
	"lock_busy":              "busy",
	"lease_lost":             "lost",
	"max_hold_exceeded":      "max_hold",
	"limit_conflict":         "limit",
	"session_lost":           "session_lost",
	"session_full":           "session_full",
	"backend_unavailable":    "unavailable",
	"shutting_down":          "unavailable",
	"overloaded":             "unavailable",
	"too_many_waiters":       "unavailable",
	"too_many_streams":       "unavailable",
	"contended":              "unavailable",
	"rate_limited":           "unavailable",
	"too_many_sessions":      "unavailable",
	"request_timeout":        "unavailable",
	"internal":               "unavailable",
	"invalid_request":        "invalid",
	"payload_too_large":      "invalid",
	"unsupported_media_type": "invalid",
	"not_found":              "invalid",
	"method_not_allowed":     "invalid",
	"uri_too_long":           "invalid",
	"headers_too_large":      "invalid",
	"unauthorized":           "auth",
	"forbidden":              "auth",
}

// byStatus types answers that carry no known code (a proxy's HTML 502, say).
var byStatus = map[int]string{
	400: "invalid", 401: "auth", 403: "auth", 404: "invalid", 405: "invalid",
	408: "unavailable", 413: "invalid", 414: "invalid", 415: "invalid", 423: "busy", 429: "unavailable",
	431: "invalid",
}

// errorFromAnswer turns a non-2xx answer into the matching error type.
func errorFromAnswer(status int, body *errorBody, retryAfter string) error {
	base := BrokerError{Status: status, RetryAfter: parseRetryAfter(retryAfter)}
	if body != nil {
		base.Code, base.Message, base.Field = body.Code, body.Message, body.Field
	} else {
		body = &errorBody{}
	}
	if base.Code == "" {
		base.Code = "http_" + strconv.Itoa(status)
	}
	if base.Message == "" {
		base.Message = fmt.Sprintf("the broker answered HTTP %d", status)
	}
	kind, known := kinds[base.Code]
	if !known {
		kind = byStatus[status]
		if kind == "" && status >= 500 {
			kind = "unavailable"
		}
	}
	switch kind {
	case "busy":
		busy := &LockBusy{BrokerError: base, Fence: body.Fence,
			ExpiresIn:   millis(body.ExpiresInMs),
			AvailableIn: millis(body.AvailableInMs), Holders: holdersOf(body.Holders), Limit: body.Limit,
			Lock: body.Lock}
		if body.Owner != nil {
			busy.Owner = *body.Owner
		}
		return busy
	case "lost":
		return &LeaseLost{BrokerError: base, Reason: "lease_lost", ForceReleasedBy: body.ForcedBy}
	case "max_hold":
		return &MaxHoldExceeded{BrokerError: base, ExpiresIn: millis(body.ExpiresInMs)}
	case "limit":
		return &LimitConflict{BrokerError: base, Limit: body.Limit}
	case "session_lost":
		return &SessionLost{BrokerError: base, Reason: "session_lost"}
	case "session_full":
		return &SessionFull{BrokerError: base}
	case "unavailable":
		return &Unavailable{BrokerError: base}
	case "invalid":
		return &InvalidRequest{BrokerError: base}
	case "auth":
		return &AuthError{BrokerError: base}
	}
	return &base
}

// transportError is a call that got no answer.
func transportError(endpoint string, cause error) error {
	return &Unavailable{BrokerError: BrokerError{
		Code:    "transport",
		Message: fmt.Sprintf("cannot reach the broker at %s: %v", endpoint, cause),
		cause:   cause,
	}}
}

// lostLocally is the error of a lease this client stopped trusting.
func lostLocally(name string, fence int64, reason string) *LeaseLost {
	return &LeaseLost{Reason: reason, BrokerError: BrokerError{
		Code: "lease_lost",
		Message: fmt.Sprintf("the lease on %q (fence %d) is lost (%s); another holder may "+
			"already be running, so treat the work as possibly duplicated", name, fence, reason),
	}}
}

// sessionLostLocally is the error of a session this client stopped trusting
// (reason "expired") or closed (reason "closed").
func sessionLostLocally(id, reason string) *SessionLost {
	message := fmt.Sprintf("the session %s is lost (%s): no keepalive succeeded within its TTL, so every "+
		"lease under it may have ended; treat the work as possibly duplicated", id, reason)
	if reason == "closed" {
		message = fmt.Sprintf("the session %s is closed: open a new session to take leases", id)
	}
	return &SessionLost{Reason: reason, BrokerError: BrokerError{Code: "session_lost", Message: message}}
}

func parseRetryAfter(value string) time.Duration {
	seconds, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil || seconds < 0 {
		return 0 // absent, or an HTTP date: rare from a broker
	}
	return time.Duration(seconds * float64(time.Second))
}

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
