package lockbroker

// The Server-Sent Events parser, on the wire format's corner cases.

import (
	"bufio"
	"strings"
	"testing"
)

func TestParserReadsFieldsCommentsAndLineEnds(t *testing.T) {
	stream := ": keep-alive\r\nevent: lagged\r\nid: 7\r\ndata: {\"missed\":\r\ndata: 3}\r\n\r\n" +
		"id: 8\n\n" + "retry: 1500\nevent: released\ndata:{\"name\":\"n\",\"fence\":4}\n\n"
	reader := bufio.NewReader(strings.NewReader(stream))
	parser := &sseParser{}
	var got []*sseMessage
	for {
		line, err := readLine(reader)
		if err != nil {
			break
		}
		message, err := parser.line(line)
		if err != nil {
			t.Fatal(err)
		}
		if message != nil {
			got = append(got, message)
		}
	}
	if len(got) != 2 {
		t.Fatalf("messages: %+v", got)
	}
	if got[0].event != "lagged" || got[0].data != "{\"missed\":\n3}" || got[0].id != "7" {
		t.Fatalf("first: %+v", got[0])
	}
	// The id of a block without data carries over as the last id, not as the
	// next message's own.
	if got[1].id != "" || got[1].lastID != "8" || parser.retry.Milliseconds() != 1500 {
		t.Fatalf("second: %+v retry %s", got[1], parser.retry)
	}
	if lagged, ok := eventOf(&sseMessage{event: "lagged", data: `{"missed":3}`}).(*Lagged); !ok || lagged.Missed != 3 {
		t.Fatalf("lagged: %#v", lagged)
	}
	if eventOf(&sseMessage{event: "novel", data: `{}`}) != nil {
		t.Fatal("an unknown event type is not skipped")
	}
}

func TestLeaderViewFollowsTheExclusiveHolderAndNeverGoesBack(t *testing.T) {
	var view leaderView
	view.apply(&LockState{LockStatus: LockStatus{Held: true, Mode: ModeExclusive, Owner: "a", Fence: 5,
		Holders: []Holder{{Owner: "a", Fence: 5, Mode: ModeExclusive}}}})
	if !view.held || view.owner != "a" || view.term != 5 {
		t.Fatalf("after the state: %+v", view)
	}
	view.apply(&LockEvent{Type: "acquired", Mode: ModeExclusive, Owner: "b", Fence: 7})
	view.apply(&LockEvent{Type: "extended", Mode: ModeExclusive, Owner: "a", Fence: 5}) // older: late
	view.apply(&LockEvent{Type: "released", Mode: ModeExclusive, Owner: "a", Fence: 5}) // not the term
	if !view.held || view.owner != "b" || view.term != 7 {
		t.Fatalf("an older lease moved the view: %+v", view)
	}
	view.apply(&LockEvent{Type: "acquired", Mode: ModeShared, Owner: "r", Fence: 9})
	view.apply(&LockEvent{Type: "expired", Mode: ModeExclusive, Owner: "b", Fence: 7})
	if view.held {
		t.Fatalf("after the leader's expiry: %+v", view)
	}
}
