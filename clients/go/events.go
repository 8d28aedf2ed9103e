package lockbroker

// The items of an event stream and the Server-Sent Events parser that reads
// them off the wire.

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"time"
)

// maxEventBytes bounds one event (its lines together); a longer one ends the
// connection, which is then opened again.
const maxEventBytes = 1 << 20

// Event is one item of a watch: a *LockState, *StateComplete, *LockEvent or
// *Lagged. EventID is its id ("" when the broker sent none).
type Event interface {
	EventID() string
}

// LockState is a state event: the lock's status as Status reads it, first on
// every stream, after Lagged, and when a resume was not possible. A prefix
// stream sends one per lock held under the prefix, then a *StateComplete.
type LockState struct {
	LockStatus
	ID string
}

// StateComplete ends a prefix stream's opening list of LockStates.
type StateComplete struct {
	Prefix string
	ID     string
}

// LockEvent is one change to one lease: Type is "acquired", "extended",
// "released", "expired" or "force_released", one per holder for shared leases.
// It never carries a token.
type LockEvent struct {
	Type string
	Name string
	// Mode is ModeExclusive, ModeShared or ModePermit.
	Mode string
	// Fence is the lease's fence (a leader's term).
	Fence int64
	Owner string
	// ExpiresIn is what the lease had left when the change was made (0 once
	// it ended).
	ExpiresIn time.Duration
	// ExpiresAtMs is the lease's expiry in Unix milliseconds of the Redis
	// clock; 0 when the broker does not know it.
	ExpiresAtMs int64
	ID          string
}

// Lagged says this reader fell too far behind and Missed events were dropped;
// a fresh LockState follows.
type Lagged struct {
	Missed int
	ID     string
}

// EventID is the event's id.
func (e *LockState) EventID() string { return e.ID }

// EventID is the event's id.
func (e *StateComplete) EventID() string { return e.ID }

// EventID is the event's id.
func (e *LockEvent) EventID() string { return e.ID }

// EventID is the event's id.
func (e *Lagged) EventID() string { return e.ID }

var changeTypes = map[string]bool{
	"acquired": true, "extended": true, "released": true, "expired": true, "force_released": true,
}

// sseMessage is one dispatched Server-Sent Event: its type, data and own id,
// and the stream's last event id once it was read.
type sseMessage struct {
	event, data, id, lastID string
}

// sseParser reads the event-stream format line by line (WHATWG HTML, "Server-
// sent events"): it keeps the last event id across events, as a reconnect sends
// it back.
type sseParser struct {
	lastID string
	retry  time.Duration // the stream's "retry:" field, 0 if none came
	event  string
	data   bytes.Buffer
	id     string
	hasID  bool
	// dataLines counts the data lines of the event being read: one empty
	// "data:" line still makes an event.
	dataLines int
	size      int // bytes of the event's lines so far
}

var errEventTooLarge = errors.New("lockbroker: an event of the stream is larger than 1 MiB")

// line takes one line (without its end of line) and returns the message a
// blank line completes.
func (p *sseParser) line(line []byte) (*sseMessage, error) {
	if len(line) == 0 {
		return p.dispatch(), nil
	}
	if p.size += len(line); p.size > maxEventBytes {
		return nil, errEventTooLarge
	}
	if line[0] == ':' {
		return nil, nil // a comment: the keep-alive
	}
	field, value := line, []byte{}
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], bytes.TrimPrefix(line[i+1:], []byte(" "))
	}
	switch string(field) {
	case "event":
		p.event = string(value)
	case "data":
		if p.dataLines > 0 {
			p.data.WriteByte('\n')
		}
		p.data.Write(value)
		p.dataLines++
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			p.id, p.hasID, p.lastID = string(value), true, string(value)
		}
	case "retry":
		if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 {
			p.retry = time.Duration(ms) * time.Millisecond
		}
	}
	return nil, nil
}

func (p *sseParser) dispatch() *sseMessage {
	defer func() {
		p.event, p.id, p.hasID, p.size, p.dataLines = "", "", false, 0, 0
		p.data.Reset()
	}()
	if p.dataLines == 0 {
		return nil // no data: nothing to dispatch (an id alone still counts)
	}
	kind := p.event
	if kind == "" {
		kind = "message"
	}
	id := ""
	if p.hasID {
		id = p.id
	}
	return &sseMessage{event: kind, data: p.data.String(), id: id, lastID: p.lastID}
}

var digits = regexp.MustCompile(`^[0-9]{1,20}$`)

// numericID is an event id as a number (ids compare as numbers); false if it
// is none.
func numericID(id string) (uint64, bool) {
	if !digits.MatchString(id) {
		return 0, false
	}
	n, err := strconv.ParseUint(id, 10, 64)
	return n, err == nil
}

// eventOf is the typed event of a message; nil for a type this client does not
// know (a newer broker's) or data it cannot read.
func eventOf(m *sseMessage) Event {
	switch {
	case m.event == "state":
		var marker struct {
			Prefix   *string `json:"prefix"`
			Complete bool    `json:"complete"`
		}
		if json.Unmarshal([]byte(m.data), &marker) == nil && marker.Complete && marker.Prefix != nil {
			return &StateComplete{Prefix: *marker.Prefix, ID: m.id}
		}
		var status statusAnswer
		if json.Unmarshal([]byte(m.data), &status) != nil {
			return nil
		}
		return &LockState{LockStatus: *status.status(), ID: m.id}
	case changeTypes[m.event]:
		var change struct {
			Name        string  `json:"name"`
			Mode        string  `json:"mode"`
			Fence       int64   `json:"fence"`
			Owner       *string `json:"owner"`
			ExpiresInMs int64   `json:"expires_in_ms"`
			ExpiresAtMs *int64  `json:"expires_at_ms"`
		}
		if json.Unmarshal([]byte(m.data), &change) != nil {
			return nil
		}
		event := &LockEvent{Type: m.event, Name: change.Name, Mode: change.Mode, Fence: change.Fence,
			Owner: deref(change.Owner), ExpiresIn: millis(change.ExpiresInMs), ID: m.id}
		if event.Mode == "" {
			event.Mode = ModeExclusive
		}
		if change.ExpiresAtMs != nil {
			event.ExpiresAtMs = *change.ExpiresAtMs
		}
		return event
	case m.event == "lagged":
		var lagged struct {
			Missed int `json:"missed"`
		}
		if json.Unmarshal([]byte(m.data), &lagged) != nil {
			return nil
		}
		return &Lagged{Missed: lagged.Missed, ID: m.id}
	}
	return nil
}
