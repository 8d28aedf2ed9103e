package lockbroker

// Who holds a lock or a semaphore: the lease modes, Holder, and the status
// answers of both.

import "time"

// The modes of a lease, as Lease.Mode, Holder.Mode and LockEvent.Mode name them.
const (
	// ModeExclusive is a lock's lease that keeps every other lease out.
	ModeExclusive = "exclusive"
	// ModeShared is a lock's lease granted beside other shared leases.
	ModeShared = "shared"
	// ModePermit is one of a semaphore's permits.
	ModePermit = "permit"
)

// Holder is one valid lease or permit as others see it; never its token.
type Holder struct {
	// Owner is the holder's label ("" when it gave none).
	Owner string
	Fence int64
	// Mode is ModeExclusive, ModeShared or ModePermit.
	Mode string
	// ExpiresIn is how long the lease stays valid unless renewed.
	ExpiresIn time.Duration
	// AvailableIn is how long until the lease, with its lock-delay, is out of
	// the way.
	AvailableIn time.Duration
}

// holderAnswer is the JSON of a LeaseHolder.
type holderAnswer struct {
	Owner         *string `json:"owner"`
	Fence         int64   `json:"fence"`
	Mode          string  `json:"mode"`
	ExpiresInMs   int64   `json:"expires_in_ms"`
	AvailableInMs int64   `json:"available_in_ms"`
}

func holdersOf(answers []holderAnswer) []Holder {
	holders := make([]Holder, 0, len(answers))
	for _, a := range answers {
		holders = append(holders, Holder{Owner: deref(a.Owner), Fence: a.Fence, Mode: a.Mode,
			ExpiresIn: millis(a.ExpiresInMs), AvailableIn: millis(a.AvailableInMs)})
	}
	return holders
}

// statusAnswer is the JSON of a LockStatus (GET /v1/locks/{name}, and the
// state events of a lock's stream).
type statusAnswer struct {
	Name          string         `json:"name"`
	Held          bool           `json:"held"`
	Owner         *string        `json:"owner"`
	Fence         *int64         `json:"fence"`
	ExpiresInMs   int64          `json:"expires_in_ms"`
	AvailableInMs int64          `json:"available_in_ms"`
	Mode          *string        `json:"mode"`
	Holders       []holderAnswer `json:"holders"`
	HolderCount   int            `json:"holder_count"`
	Waiting       int            `json:"waiting"`
}

func (a *statusAnswer) status() *LockStatus {
	status := &LockStatus{Name: a.Name, Held: a.Held, Owner: deref(a.Owner),
		ExpiresIn: millis(a.ExpiresInMs), AvailableIn: millis(a.AvailableInMs),
		Mode: deref(a.Mode), Holders: holdersOf(a.Holders), HolderCount: a.HolderCount,
		Waiting: a.Waiting}
	if a.Fence != nil {
		status.Fence = *a.Fence
	}
	return status
}

// SemaphoreStatus is a semaphore's state as GET /v1/semaphores/{name} reports
// it. It never holds a token.
type SemaphoreStatus struct {
	Name string
	// Limit is the limit the permits are held under; 0 while none is held.
	Limit int
	// Held counts the valid permits.
	Held int
	// Available is how many permits could be granted now; 0 while none is
	// held (then Limit is 0 too, and any limit may be asked for).
	Available int
	// Fence is the last fence issued for the semaphore; 0 when none is
	// remembered.
	Fence int64
	// Holders lists every valid permit, at most 100.
	Holders []Holder
	// AvailableIn is how long until a permit can be granted at the earliest.
	AvailableIn time.Duration
	// Waiting counts the permit requests waiting in the semaphore's queue.
	Waiting int
}

// semaphoreAnswer is the JSON of a SemaphoreStatus.
type semaphoreAnswer struct {
	Name          string         `json:"name"`
	Limit         *int           `json:"limit"`
	Held          int            `json:"held"`
	Available     *int           `json:"available"`
	Fence         *int64         `json:"fence"`
	Holders       []holderAnswer `json:"holders"`
	AvailableInMs int64          `json:"available_in_ms"`
	Waiting       int            `json:"waiting"`
}

func (a *semaphoreAnswer) status() *SemaphoreStatus {
	status := &SemaphoreStatus{Name: a.Name, Held: a.Held, Holders: holdersOf(a.Holders),
		AvailableIn: millis(a.AvailableInMs), Waiting: a.Waiting}
	if a.Limit != nil {
		status.Limit = *a.Limit
	}
	if a.Available != nil {
		status.Available = *a.Available
	}
	if a.Fence != nil {
		status.Fence = *a.Fence
	}
	return status
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
