package lockbroker_test

// The shared scenarios (../scenarios/*.json, described in its README) replayed
// through this client's public API against the real broker. Every file runs; a
// step this client cannot express fails the test, as does a malformed one.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

// scenarioDir holds the scenario files, beside this module.
const scenarioDir = "../scenarios"

// stepArgs lists every operation this runner knows and the arguments it takes.
var stepArgs = map[string][]string{
	"acquire":                {"lock", "ttl_ms", "wait_ms", "owner", "shared", "request_id"},
	"acquire_permit":         {"semaphore", "limit", "ttl_ms", "wait_ms", "owner"},
	"lock":                   {"lock", "ttl_ms", "owner", "shared"},
	"await":                  {"step"},
	"extend":                 {"lease", "ttl_ms"},
	"extend_token":           {"lease", "ttl_ms"},
	"release":                {"lease"},
	"lease_state":            {"lease"},
	"status":                 {"lock"},
	"semaphore_status":       {"semaphore"},
	"check_fence":            {"lock", "fence"},
	"check_semaphore_fence":  {"semaphore", "fence"},
	"lease_check_fence":      {"lease"},
	"watch":                  {"lock"},
	"next_event":             {"watch"},
	"sleep":                  {"ms"},
	"open_session":           {"ttl_ms", "owner", "lock_delay_ms"},
	"session_acquire":        {"session", "lock", "shared", "wait_ms", "owner"},
	"session_acquire_permit": {"session", "semaphore", "limit", "wait_ms", "owner"},
	"session_status":         {"session"},
	"session_state":          {"session"},
	"close_session":          {"session"},
	"end_session_elsewhere":  {"session"},
	"campaign":               {"lock", "ttl_ms", "max_hold_ms", "owner"},
	"leader_state":           {"candidate"},
	"resign":                 {"candidate"},
}

// Keys every step may have, besides its operation's arguments.
var commonKeys = []string{"do", "as", "expect", "within_ms", "async", "note"}

// Reads, which within_ms may repeat; and the grants (and campaigns) async may start.
var (
	readSteps = []string{"status", "semaphore_status", "check_fence", "check_semaphore_fence", "lease_check_fence",
		"lease_state", "leader_state", "session_status", "session_state"}
	asyncSteps = []string{"acquire", "acquire_permit", "lock", "campaign"}
)

// awaitLimit is how long a campaign or an awaited async step may take.
const awaitLimit = 30 * time.Second

type scenarioFile struct {
	About string           `json:"about"`
	Steps []map[string]any `json:"steps"`
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenario in %s", scenarioDir)
	}
	sort.Strings(files)
	for _, file := range files {
		file := file
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			decoder := json.NewDecoder(strings.NewReader(string(raw)))
			decoder.UseNumber()
			decoder.DisallowUnknownFields()
			var scenario scenarioFile
			if err := decoder.Decode(&scenario); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if scenario.About == "" || len(scenario.Steps) == 0 {
				t.Fatalf("%s: a scenario needs an about and steps", file)
			}
			newReplay(t).run(scenario.Steps)
		})
	}
}

// outcome is what a step (or an async one, once awaited) came to.
type outcome struct {
	result map[string]any
	lease  *lockbroker.Lease
	err    error
}

// replay is one scenario's run: its names' prefix, and what its steps kept.
type replay struct {
	t       *testing.T
	client  *lockbroker.Client
	prefix  string
	results map[string]map[string]any
	leases  map[string]*lockbroker.Lease
	watches map[string]*lockbroker.Watcher
	pending map[string]chan outcome
	// candidates are the campaigns' leader helpers; closing ends the waits
	// for their election once the scenario is over.
	candidates map[string]*lockbroker.Leader
	closing    chan struct{}
	// sessions are the session helpers open_session opened.
	sessions map[string]*lockbroker.Session
}

func newReplay(t *testing.T) *replay {
	var random [4]byte
	if _, err := rand.Read(random[:]); err != nil {
		t.Fatal(err)
	}
	r := &replay{t: t, client: newClient(t), prefix: "scn-" + hex.EncodeToString(random[:]) + "-",
		results: map[string]map[string]any{}, leases: map[string]*lockbroker.Lease{},
		watches: map[string]*lockbroker.Watcher{}, pending: map[string]chan outcome{},
		candidates: map[string]*lockbroker.Leader{}, closing: make(chan struct{}),
		sessions: map[string]*lockbroker.Session{}}
	t.Cleanup(r.cleanup)
	return r
}

// cleanup releases what the scenario still holds and closes its watches.
func (r *replay) cleanup() {
	for _, w := range r.watches {
		w.Close()
	}
	close(r.closing)
	for _, leader := range r.candidates {
		_ = leader.Stop(bg)
	}
	for name, pending := range r.pending {
		select {
		case done := <-pending:
			if done.lease != nil {
				r.leases[name+" (async)"] = done.lease
			}
		case <-time.After(15 * time.Second):
			r.t.Errorf("the async step %q did not finish", name)
		}
	}
	for _, lease := range r.leases {
		_ = lease.Release(bg)
	}
	for _, session := range r.sessions {
		_ = session.Close(bg)
	}
}

func (r *replay) run(steps []map[string]any) {
	for i, step := range steps {
		op := r.validate(i, step)
		label := fmt.Sprintf("step %d (%s)", i+1, op)
		as, _ := step["as"].(string)
		if async, _ := step["async"].(bool); async {
			r.start(label, op, as, step)
			continue
		}
		expect, _ := step["expect"].(map[string]any)
		deadline := time.Now()
		if within, ok := step["within_ms"]; ok {
			deadline = deadline.Add(time.Duration(r.int(label, within)) * time.Millisecond)
		}
		for {
			done := r.do(label, op, step)
			problem := r.check(expect, done)
			if problem == "" {
				r.keep(as, done)
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("%s: %s", label, problem)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// validate checks a step's keys against the vocabulary and returns its operation.
func (r *replay) validate(i int, step map[string]any) string {
	op, _ := step["do"].(string)
	args, known := stepArgs[op]
	if !known {
		r.t.Fatalf("step %d: this client cannot express the operation %q", i+1, step["do"])
	}
	for key := range step {
		if !contains(commonKeys, key) && !contains(args, key) {
			r.t.Fatalf("step %d (%s): unknown key %q", i+1, op, key)
		}
	}
	if _, ok := step["within_ms"]; ok && !contains(readSteps, op) {
		r.t.Fatalf("step %d (%s): within_ms repeats reads only", i+1, op)
	}
	if async, _ := step["async"].(bool); async && (!contains(asyncSteps, op) || step["as"] == nil) {
		r.t.Fatalf("step %d (%s): async is for grants kept with as", i+1, op)
	}
	if expect, ok := step["expect"]; ok {
		if _, isMap := expect.(map[string]any); !isMap {
			r.t.Fatalf("step %d (%s): expect must be an object", i+1, op)
		}
	}
	return op
}

func (r *replay) keep(as string, done outcome) {
	if as == "" {
		return
	}
	r.results[as] = done.result
	if done.lease != nil {
		r.leases[as] = done.lease
	}
}

// start runs a grant, or waits for a candidate's election, in the
// background; await collects it. A candidate exists from its step on.
func (r *replay) start(label, op, as string, step map[string]any) {
	finished := make(chan outcome, 1)
	r.pending[as] = finished
	if op == "campaign" {
		leader := r.campaign(label, step)
		go func() { finished <- r.elected(leader) }()
		return
	}
	go func() { finished <- r.do(label, op, step) }()
}

// campaign makes a candidate, keeps it under the step's as, and starts it.
func (r *replay) campaign(label string, step map[string]any) *lockbroker.Leader {
	as, _ := step["as"].(string)
	if as == "" {
		r.t.Fatalf("%s: a candidate needs as", label)
	}
	lock, _ := r.resolve(label, step["lock"]).(string)
	owner, _ := r.resolve(label, step["owner"]).(string)
	if lock == "" {
		r.t.Fatalf("%s: lock must name a lock", label)
	}
	ms := func(key string) time.Duration {
		if step[key] == nil {
			return 0
		}
		return time.Duration(r.int(label, r.resolve(label, step[key]))) * time.Millisecond
	}
	leader, err := r.client.Leader(r.prefix+lock, lockbroker.LeaderOptions{TTL: ms("ttl_ms"),
		MaxHold: ms("max_hold_ms"), Owner: owner})
	if err != nil {
		r.t.Fatalf("%s: %v", label, err)
	}
	r.candidates[as] = leader
	if err := leader.Start(bg); err != nil {
		r.t.Fatalf("%s: %v", label, err)
	}
	return leader
}

// elected waits until the candidate leads; a campaign that gave up is its
// error.
func (r *replay) elected(leader *lockbroker.Leader) outcome {
	limit := time.After(awaitLimit)
	for {
		select {
		case <-leader.Elected():
			return outcome{result: map[string]any{"term": orNull(leader.Term())}}
		case <-r.closing:
			return outcome{err: errors.New("the scenario ended first")}
		case <-limit:
			return outcome{err: fmt.Errorf("not elected within %v", awaitLimit)}
		case <-time.After(50 * time.Millisecond):
			if err := leader.Err(); err != nil {
				return outcome{err: err}
			}
		}
	}
}

func (r *replay) candidate(label, name string) *lockbroker.Leader {
	leader, ok := r.candidates[name]
	if !ok {
		r.t.Fatalf("%s: no candidate %q", label, name)
	}
	return leader
}

// leaderState is the candidate's own account: its term while it leads,
// whether its term was lost, and who leads as the lock's events show it.
func leaderState(leader *lockbroker.Leader) map[string]any {
	lost := false
	select {
	case <-leader.Lost():
		lost = true
	default:
	}
	owner, term := leader.Current()
	return map[string]any{"is_leader": leader.IsLeader(), "term": orNull(leader.Term()), "lost": lost,
		"lost_reason": orNull(leader.LostReason()), "leader": orNull(owner), "leader_term": orNull(term)}
}

// do runs one operation through the client's public API.
func (r *replay) do(label, op string, step map[string]any) outcome {
	arg := func(key string) any { return r.resolve(label, step[key]) }
	ms := func(key string) time.Duration {
		if step[key] == nil {
			return 0
		}
		return time.Duration(r.int(label, arg(key))) * time.Millisecond
	}
	str := func(key string) string {
		value, _ := arg(key).(string)
		return value
	}
	flag := func(key string) bool {
		value, _ := arg(key).(bool)
		return value
	}
	name := func(key string) string {
		if str(key) == "" {
			r.t.Fatalf("%s: %s must name a %s", label, key, key)
		}
		return r.prefix + str(key)
	}
	switch op {
	case "acquire":
		return r.granted(r.client.Acquire(bg, name("lock"), lockbroker.AcquireOptions{TTL: ms("ttl_ms"),
			Wait: ms("wait_ms"), Owner: str("owner"), Shared: flag("shared"), RequestID: str("request_id")}))
	case "acquire_permit":
		return r.granted(r.client.AcquirePermit(bg, name("semaphore"), int(r.int(label, arg("limit"))),
			lockbroker.AcquireOptions{TTL: ms("ttl_ms"), Wait: ms("wait_ms"), Owner: str("owner")}))
	case "lock":
		return r.granted(r.client.Lock(bg, name("lock"), lockbroker.LockOptions{TTL: ms("ttl_ms"),
			Owner: str("owner"), Shared: flag("shared")}))
	case "await":
		pending, ok := r.pending[str("step")]
		if !ok {
			r.t.Fatalf("%s: no async step %q to await", label, str("step"))
		}
		delete(r.pending, str("step"))
		select {
		case done := <-pending:
			if done.lease != nil {
				r.leases[str("step")] = done.lease
			}
			r.results[str("step")] = done.result
			return done
		case <-time.After(awaitLimit):
			r.t.Fatalf("%s: the async step did not finish within %v", label, awaitLimit)
		}
	case "extend":
		return outcome{result: map[string]any{}, err: r.lease(label, str("lease")).Extend(bg, ms("ttl_ms"))}
	case "extend_token":
		lease := r.lease(label, str("lease"))
		extend := r.client.Extend
		if lease.Mode == lockbroker.ModePermit {
			extend = r.client.ExtendPermit
		}
		renewal, err := extend(bg, lease.Name, lease.Token(), ms("ttl_ms"))
		if err != nil {
			return outcome{err: err}
		}
		return outcome{result: map[string]any{"fence": renewal.Fence, "ttl_ms": renewal.TTL.Milliseconds()}}
	case "release":
		return outcome{result: map[string]any{}, err: r.lease(label, str("lease")).Release(bg)}
	case "lease_state":
		return outcome{result: r.leaseState(label, r.lease(label, str("lease")))}
	case "status":
		s, err := r.client.Status(bg, name("lock"))
		if err != nil {
			return outcome{err: err}
		}
		return outcome{result: map[string]any{"held": s.Held, "owner": orNull(s.Owner), "fence": orNull(s.Fence),
			"mode": orNull(s.Mode), "holder_count": s.HolderCount, "waiting": s.Waiting}}
	case "semaphore_status":
		s, err := r.client.SemaphoreStatus(bg, name("semaphore"))
		if err != nil {
			return outcome{err: err}
		}
		// Limit 0 is how this client says "no limit while no permit is held".
		result := map[string]any{"limit": orNull(s.Limit), "held": s.Held, "available": s.Available,
			"fence": orNull(s.Fence)}
		if s.Limit == 0 {
			result["available"] = nil
		}
		return outcome{result: result}
	case "check_fence":
		return r.fence(r.client.CheckFence(bg, name("lock"), r.int(label, arg("fence"))))
	case "check_semaphore_fence":
		return r.fence(r.client.CheckSemaphoreFence(bg, name("semaphore"), r.int(label, arg("fence"))))
	case "lease_check_fence":
		return r.fence(r.lease(label, str("lease")).CheckFence(bg))
	case "watch":
		w, err := r.client.Watch(bg, name("lock"), lockbroker.WatchOptions{})
		if err != nil {
			return outcome{err: err}
		}
		if as, _ := step["as"].(string); as != "" {
			r.watches[as] = w
		} else {
			r.t.Fatalf("%s: a watch needs as", label)
		}
		return outcome{result: map[string]any{}}
	case "next_event":
		return r.nextEvent(label, str("watch"))
	case "sleep":
		time.Sleep(ms("ms"))
		return outcome{result: map[string]any{}}
	case "open_session":
		return r.openSession(label, step, ms)
	case "session_acquire":
		return r.granted(r.session(label, str("session")).Acquire(bg, name("lock"),
			lockbroker.AcquireOptions{Wait: ms("wait_ms"), Owner: str("owner"), Shared: flag("shared")}))
	case "session_acquire_permit":
		return r.granted(r.session(label, str("session")).AcquirePermit(bg, name("semaphore"),
			int(r.int(label, arg("limit"))), lockbroker.AcquireOptions{Wait: ms("wait_ms"), Owner: str("owner")}))
	case "session_status":
		status, err := r.session(label, str("session")).Status(bg)
		if err != nil {
			return outcome{err: err}
		}
		return outcome{result: map[string]any{"open": status.Open, "owner": orNull(status.Owner),
			"leases": status.Leases, "ttl_ms": orNull(status.TTL.Milliseconds())}}
	case "session_state":
		return outcome{result: r.sessionState(label, r.session(label, str("session")))}
	case "close_session":
		session := r.session(label, str("session"))
		if err := session.Close(bg); err != nil {
			return outcome{err: err}
		}
		return outcome{result: map[string]any{"leases_released": session.LeasesReleased()}}
	case "end_session_elsewhere":
		session := r.session(label, str("session"))
		_, err := r.client.CloseSession(bg, session.ID(), session.Token())
		return outcome{result: map[string]any{}, err: err}
	case "campaign":
		return r.elected(r.campaign(label, step))
	case "leader_state":
		return outcome{result: leaderState(r.candidate(label, str("candidate")))}
	case "resign":
		return outcome{result: map[string]any{}, err: r.candidate(label, str("candidate")).Resign(bg)}
	}
	r.t.Fatalf("%s: this client cannot express the operation", label)
	return outcome{}
}

// openSession opens a session with the helper and keeps it under the step's
// as.
func (r *replay) openSession(label string, step map[string]any, ms func(string) time.Duration) outcome {
	as, _ := step["as"].(string)
	if as == "" {
		r.t.Fatalf("%s: a session needs as", label)
	}
	owner, _ := r.resolve(label, step["owner"]).(string)
	lockDelay := ms("lock_delay_ms")
	if step["lock_delay_ms"] != nil && lockDelay == 0 {
		lockDelay = lockbroker.NoLockDelay
	}
	session, err := r.client.OpenSession(bg, lockbroker.SessionOptions{TTL: ms("ttl_ms"), Owner: owner,
		LockDelay: lockDelay})
	if err != nil {
		return outcome{err: err}
	}
	r.sessions[as] = session
	return outcome{result: map[string]any{"id": session.ID(), "ttl_ms": session.TTL().Milliseconds(),
		"owner": orNull(session.Owner()), "lock_delay_ms": session.LockDelay().Milliseconds()}}
}

func (r *replay) session(label, name string) *lockbroker.Session {
	session, ok := r.sessions[name]
	if !ok {
		r.t.Fatalf("%s: no session %q", label, name)
	}
	return session
}

// sessionState reads the session helper, and requires its signals to agree:
// Context done once lost or closed, Lost closed once lost, neither before.
func (r *replay) sessionState(label string, session *lockbroker.Session) map[string]any {
	err := session.Err()
	state := "open"
	switch {
	case err == nil:
	case errors.Is(err, lockbroker.ErrSessionLost):
		state = "lost"
	case errors.Is(err, lockbroker.ErrSessionClosed):
		state = "closed"
	default:
		r.t.Fatalf("%s: the session reports %v", label, err)
	}
	if done := session.Context().Err() != nil; done != (state != "open") {
		r.t.Fatalf("%s: the session is %s but its Context done is %v", label, state, done)
	}
	lost := false
	select {
	case <-session.Lost():
		lost = true
	default:
	}
	if lost != (state == "lost") {
		r.t.Fatalf("%s: the session is %s but Lost closed is %v", label, state, lost)
	}
	return map[string]any{"state": state}
}

func (r *replay) granted(lease *lockbroker.Lease, err error) outcome {
	if err != nil {
		return outcome{err: err}
	}
	result := map[string]any{"name": strings.TrimPrefix(lease.Name, r.prefix), "fence": lease.Fence,
		"owner": orNull(lease.Owner), "mode": lease.Mode}
	if lease.Mode == lockbroker.ModePermit {
		result["limit"] = lease.Limit
	}
	return outcome{result: result, lease: lease}
}

func (r *replay) fence(check *lockbroker.FenceCheck, err error) outcome {
	if err != nil {
		return outcome{err: err}
	}
	return outcome{result: map[string]any{"name": strings.TrimPrefix(check.Name, r.prefix), "fence": check.Fence,
		"current": check.Current, "held": check.Held, "expires_in_ms": check.ExpiresIn.Milliseconds()}}
}

// leaseState reads the lease object, and requires its loss signal (the
// Context) to agree: done once lost or released, not before.
func (r *replay) leaseState(label string, lease *lockbroker.Lease) map[string]any {
	err := lease.Err()
	state, reason := "held", any(nil)
	var lost *lockbroker.LeaseLost
	switch {
	case err == nil:
	case errors.As(err, &lost):
		state, reason = "lost", lost.Reason
	case errors.Is(err, lockbroker.ErrReleased):
		state = "released"
	default:
		r.t.Fatalf("%s: the lease reports %v", label, err)
	}
	if done := lease.Context().Err() != nil; done != (state != "held") {
		r.t.Fatalf("%s: the lease is %s but its Context done is %v", label, state, done)
	}
	return map[string]any{"state": state, "lost_reason": reason}
}

func (r *replay) nextEvent(label, name string) outcome {
	w, ok := r.watches[name]
	if !ok {
		r.t.Fatalf("%s: no watch %q", label, name)
	}
	got := make(chan outcome, 1)
	go func() {
		event, err := w.Next()
		if err != nil {
			got <- outcome{err: err}
			return
		}
		switch e := event.(type) {
		case *lockbroker.LockState:
			got <- outcome{result: map[string]any{"type": "state", "held": e.Held, "owner": orNull(e.Owner),
				"fence": orNull(e.Fence), "mode": orNull(e.Mode)}}
		case *lockbroker.LockEvent:
			got <- outcome{result: map[string]any{"type": e.Type, "fence": e.Fence, "owner": orNull(e.Owner),
				"mode": e.Mode}}
		case *lockbroker.Lagged:
			got <- outcome{result: map[string]any{"type": "lagged"}}
		case *lockbroker.StateComplete:
			got <- outcome{result: map[string]any{"type": "state_complete"}}
		default:
			got <- outcome{err: fmt.Errorf("an event of type %T", event)}
		}
	}()
	select {
	case done := <-got:
		return done
	case <-time.After(5 * time.Second):
		r.t.Fatalf("%s: no event within 5 s", label)
	}
	return outcome{}
}

func (r *replay) lease(label, name string) *lockbroker.Lease {
	lease, ok := r.leases[name]
	if !ok {
		r.t.Fatalf("%s: no lease %q", label, name)
	}
	return lease
}

// check says what is wrong with an outcome given the step's expect ("" if
// nothing).
func (r *replay) check(expect map[string]any, done outcome) string {
	want, wantsError := expect["error"]
	if !wantsError {
		if done.err != nil {
			return fmt.Sprintf("failed: %v", done.err)
		}
		return r.fields(expect, done.result)
	}
	if done.err == nil {
		return fmt.Sprintf("succeeded (%v), but the scenario expects the error %v", done.result, want)
	}
	kind, fields := errorOf(done.err)
	var kinds []string
	switch w := want.(type) {
	case string:
		kinds = []string{w}
	case []any:
		for _, k := range w {
			s, _ := k.(string)
			kinds = append(kinds, s)
		}
	}
	if !contains(kinds, kind) {
		return fmt.Sprintf("failed with %s (%v), but the scenario expects %v", kind, done.err, want)
	}
	rest := map[string]any{}
	for key, value := range expect {
		if key != "error" {
			rest[key] = value
		}
	}
	return r.fields(rest, fields)
}

func (r *replay) fields(expect, got map[string]any) string {
	keys := make([]string, 0, len(expect))
	for key := range expect {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		value, present := got[key]
		if !present {
			return fmt.Sprintf("the result has no field %q (this client cannot express it): %v", key, got)
		}
		if problem := r.match(expect[key], value); problem != "" {
			return fmt.Sprintf("%s: %s (result %v)", key, problem, got)
		}
	}
	return ""
}

// match compares one field: equal to a value or a $reference, or every
// comparison of an object holds.
func (r *replay) match(want, got any) string {
	comparisons, isMap := want.(map[string]any)
	if !isMap {
		want = r.resolve("expect", want)
		if !same(want, got) {
			return fmt.Sprintf("%v, want %v", got, want)
		}
		return ""
	}
	for op, operand := range comparisons {
		operand = r.resolve("expect", operand)
		if op == "!=" {
			if same(operand, got) {
				return fmt.Sprintf("%v, want != %v", got, operand)
			}
			continue
		}
		a, aok := number(got)
		b, bok := number(operand)
		if !aok || !bok {
			return fmt.Sprintf("%v %s %v compares numbers only", got, op, operand)
		}
		holds := map[string]bool{">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}
		if result, known := holds[op]; !known {
			r.t.Fatalf("expect: unknown comparison %q", op)
		} else if !result {
			return fmt.Sprintf("%v, want %s %v", got, op, operand)
		}
	}
	return ""
}

// resolve turns "$name.field" into that field of a kept result.
func (r *replay) resolve(label string, value any) any {
	ref, isString := value.(string)
	if !isString || !strings.HasPrefix(ref, "$") {
		return value
	}
	name, field, ok := strings.Cut(ref[1:], ".")
	result, kept := r.results[name]
	if !ok || !kept {
		r.t.Fatalf("%s: %s names no kept result", label, ref)
	}
	got, present := result[field]
	if !present {
		r.t.Fatalf("%s: the result %q has no field %q", label, name, field)
	}
	return got
}

func (r *replay) int(label string, value any) int64 {
	n, ok := number(value)
	if !ok || n != float64(int64(n)) {
		r.t.Fatalf("%s: %v is not a whole number", label, value)
	}
	return int64(n)
}

// errorOf is an error's kind in the scenarios' words, and its fields.
func errorOf(err error) (string, map[string]any) {
	var (
		busy     *lockbroker.LockBusy
		gone     *lockbroker.SessionLost
		lost     *lockbroker.LeaseLost
		limit    *lockbroker.LimitConflict
		maxHold  *lockbroker.MaxHoldExceeded
		invalid  *lockbroker.InvalidRequest
		down     *lockbroker.Unavailable
		denied   *lockbroker.AuthError
		noFields = map[string]any{}
	)
	switch {
	case errors.As(err, &busy):
		var mode any
		for _, h := range busy.Holders {
			if h.Fence == busy.Fence || mode == nil {
				mode = h.Mode
			}
		}
		return "busy", map[string]any{"owner": orNull(busy.Owner), "fence": busy.Fence, "mode": mode,
			"holder_count": len(busy.Holders), "limit": orNull(busy.Limit)}
	case errors.As(err, &gone):
		return "session_lost", noFields
	case errors.As(err, &lost):
		return "lease_lost", noFields
	case errors.Is(err, lockbroker.ErrReleased):
		return "released", noFields
	case errors.As(err, &limit):
		return "limit_conflict", map[string]any{"limit": limit.Limit}
	case errors.As(err, &maxHold):
		return "max_hold_exceeded", noFields
	case errors.As(err, &invalid):
		return "invalid_request", map[string]any{"field": orNull(invalid.Field)}
	case errors.As(err, &down):
		return "unavailable", noFields
	case errors.As(err, &denied):
		return "auth", noFields
	}
	return "other", noFields
}

// orNull is nil for this client's zero value ("", 0), which stands for the
// wire's null.
func orNull[T comparable](value T) any {
	var zero T
	if value == zero {
		return nil
	}
	return value
}

func number(value any) (float64, bool) {
	switch n := value.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func same(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

func contains(list []string, item string) bool {
	for _, each := range list {
		if each == item {
			return true
		}
	}
	return false
}
