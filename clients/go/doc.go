// Package lockbroker is the Go client of lockbroker, a lock broker that hands
// out leases with fence numbers over HTTP.
//
// A lease is valid for a TTL and carries a fence, a number larger than every
// fence issued before for the same lock. Pass the fence to whatever the work
// writes to, and have it refuse smaller fences than one it has seen: a holder
// that stalled past its lease then cannot overwrite the work of the next one.
//
//	client, err := lockbroker.NewClient("http://127.0.0.1:7700", lockbroker.ClientOptions{})
//	lease, err := client.Lock(ctx, "nightly-report", lockbroker.LockOptions{TTL: 30 * time.Second})
//	if err != nil { ... }                 // *LockBusy, *Unavailable, ...
//	defer lease.Release(context.Background())
//	err = run(lease.Context(), lease.Fence)  // Context is done if the lease is lost
//
// Lock renews the lease in the background every TTL/3 and stops at MaxHold.
// Acquire, Extend, Release and Status are the single calls of the HTTP API;
// CheckFence asks whether a fence is still current. AcquireAll takes a lease
// on every lock named or on none, and ReleaseAll gives several back at once.
// LockOptions.Shared asks for a shared lease; Semaphore and AcquirePermit take
// one of a semaphore's permits. Watch and WatchPrefix read a lock's event
// stream, resuming after a drop; Leader campaigns for leadership of a lock.
// OpenSession opens a session that keeps itself alive and renews every lease
// taken under it with one keepalive, ending them all when it is lost or
// closed. Errors are typed for errors.As and errors.Is: *LockBusy,
// ErrLeaseLost (*LeaseLost), ErrSessionLost (*SessionLost), *SessionFull,
// *MaxHoldExceeded, *LimitConflict, *Unavailable, *InvalidRequest,
// *AuthError, all unwrapping to *BrokerError.
package lockbroker

// Version is this client's version, sent in the User-Agent header.
const Version = "0.1.0"
