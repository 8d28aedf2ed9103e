package lockbroker_test

// Leader election against a real broker: one candidate leads, the other
// follows and sees who leads, a hand-over raises the term, and a lost lease
// ends the term.

import (
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func startLeader(t *testing.T, client *lockbroker.Client, name, owner string) *lockbroker.Leader {
	t.Helper()
	leader, err := client.Leader(name, lockbroker.LeaderOptions{TTL: 3 * time.Second, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(bg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.Stop(bg) })
	return leader
}

// within waits up to 5 s for check.
func within(t *testing.T, what string, check func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if check() {
			return
		}
	}
	t.Fatalf("not within 5 s: %s", what)
}

func TestLeadersHandOverWithALargerTerm(t *testing.T) {
	client, name := newClient(t), lockName(t)
	a := startLeader(t, client, name, "node-a")
	select {
	case <-a.Elected():
	case <-time.After(5 * time.Second):
		t.Fatal("the only candidate was not elected")
	}
	b := startLeader(t, client, name, "node-b")
	if !a.IsLeader() || a.Term() <= 0 {
		t.Fatalf("a: leader %v term %d", a.IsLeader(), a.Term())
	}
	firstTerm := a.Term()
	within(t, "b sees a lead", func() bool {
		owner, term := b.Current()
		return owner == "node-a" && term == firstTerm
	})
	if b.IsLeader() || b.Term() != 0 {
		t.Fatal("two leaders at once")
	}

	if err := a.Stop(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Elected():
	case <-time.After(5 * time.Second):
		t.Fatal("b did not take over")
	}
	if !b.IsLeader() || b.Term() <= firstTerm || a.IsLeader() {
		t.Fatalf("after the hand-over: b term %d, a leads %v", b.Term(), a.IsLeader())
	}
	select {
	case <-a.Lost():
		t.Fatal("a resign is not a loss")
	default:
	}
	if owner, term := b.Current(); owner != "node-b" || term != b.Term() {
		t.Fatalf("b.Current: %s %d", owner, term)
	}
}

func TestALeaderWhoseLeaseIsLostLeadsNoMore(t *testing.T) {
	client, name := newClient(t), lockName(t)
	leader := startLeader(t, client, name, "node-a")
	select {
	case <-leader.Elected():
	case <-time.After(5 * time.Second):
		t.Fatal("not elected")
	}
	work := leader.Context()
	forceRelease(t, shared, name)
	select {
	case <-leader.Lost():
	case <-time.After(5 * time.Second): // the next renewal (TTL/3) finds the lease gone
		t.Fatal("Lost not closed after the lease was taken")
	}
	if leader.IsLeader() || leader.Term() != 0 || leader.LostReason() != "lease_lost" || work.Err() == nil {
		t.Fatalf("after the loss: leader %v term %d reason %q", leader.IsLeader(), leader.Term(), leader.LostReason())
	}
}
