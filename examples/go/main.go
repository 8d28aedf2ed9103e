// Command lock acquires, extends and releases a lockbroker lock with net/http,
// prints the fence, and handles a busy lock. Standard library only.
//
//	LOCKBROKER_URL=http://127.0.0.1:7700 [LOCKBROKER_API_KEY=...] go run . [NAME]
//
// The token is a secret: it is kept in memory and never printed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

// Lease is a granted lease. Token proves it; Fence goes to the protected resource.
type Lease struct {
	Name        string `json:"name"`
	Token       string `json:"token"`
	Fence       int64  `json:"fence"`
	TTLMs       int64  `json:"ttl_ms"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
}

// APIError is the broker's {"error": {...}} body, plus the HTTP status.
type APIError struct {
	Status      int
	RetryAfter  string
	Code        string  `json:"code"`
	Message     string  `json:"message"`
	Owner       *string `json:"owner"`
	Fence       int64   `json:"fence"`
	AvailableIn int64   `json:"available_in_ms"`
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message) }

// Broker calls one lockbroker over HTTP, with a timeout on every call.
type Broker struct {
	URL    string
	APIKey string
	HTTP   *http.Client
}

func (b *Broker) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if b.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.APIKey)
	}
	resp, err := b.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("broker unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var wrapped struct{ Error APIError }
		_ = json.NewDecoder(resp.Body).Decode(&wrapped)
		apiErr := wrapped.Error
		apiErr.Status, apiErr.RetryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
		return &apiErr
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Acquire takes the lock for ttl, waiting up to wait for it.
func (b *Broker) Acquire(ctx context.Context, name, owner string, ttl, wait time.Duration) (*Lease, error) {
	var lease Lease
	in := map[string]any{"ttl_ms": ttl.Milliseconds(), "wait_ms": wait.Milliseconds(), "owner": owner}
	if err := b.call(ctx, "/v1/locks/"+url.PathEscape(name)+"/acquire", in, &lease); err != nil {
		return nil, err
	}
	return &lease, nil
}

// Extend sets the lease's remaining TTL to ttl.
func (b *Broker) Extend(ctx context.Context, lease *Lease, ttl time.Duration) error {
	in := map[string]any{"token": lease.Token, "ttl_ms": ttl.Milliseconds()}
	return b.call(ctx, "/v1/locks/"+url.PathEscape(lease.Name)+"/extend", in, lease)
}

// Release gives the lock back.
func (b *Broker) Release(ctx context.Context, lease *Lease) error {
	var out struct{ Released bool }
	in := map[string]any{"token": lease.Token}
	return b.call(ctx, "/v1/locks/"+url.PathEscape(lease.Name)+"/release", in, &out)
}

// isCode reports whether err is a broker error with this code.
func isCode(err error, code string) (*APIError, bool) {
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Code == code {
		return apiErr, true
	}
	return nil, false
}

func run() (int, error) {
	name := "example-go"
	if len(os.Args) > 1 {
		name = os.Args[1]
	}
	broker := &Broker{
		URL:    envOr("LOCKBROKER_URL", "http://127.0.0.1:7700"),
		APIKey: os.Getenv("LOCKBROKER_API_KEY"),
		HTTP:   &http.Client{Timeout: 15 * time.Second},
	}
	ctx := context.Background()

	lease, err := broker.Acquire(ctx, name, "go-example", 10*time.Second, 0)
	if busy, ok := isCode(err, "lock_busy"); ok {
		fmt.Printf("busy: %s is held by %s (fence %d); retry in %ss\n", name, ownerOf(busy), busy.Fence, busy.RetryAfter)
		return 75, nil
	} else if err != nil {
		return 1, fmt.Errorf("acquire: %w", err)
	}
	fmt.Printf("acquired %s with fence %d\n", name, lease.Fence)

	// Another worker asking now is told who holds the lock and when to retry.
	_, err = broker.Acquire(ctx, name, "second-worker", 10*time.Second, 200*time.Millisecond)
	busy, ok := isCode(err, "lock_busy")
	if !ok {
		return 1, fmt.Errorf("expected lock_busy for a second acquire, got %v", err)
	}
	fmt.Printf("second worker: busy, held by %s with fence %d, retry in %ss\n", ownerOf(busy), busy.Fence, busy.RetryAfter)

	if err := broker.Extend(ctx, lease, 20*time.Second); err != nil {
		return 1, fmt.Errorf("extend: %w", err)
	}
	fmt.Printf("extended: fence %d, ttl %d ms\n", lease.Fence, lease.TTLMs)

	if err := broker.Release(ctx, lease); err != nil {
		if _, lost := isCode(err, "lease_lost"); lost {
			return 1, errors.New("lease lost before release: treat the work as possibly duplicated")
		}
		return 1, fmt.Errorf("release: %w", err)
	}
	fmt.Printf("released: fence %d\n", lease.Fence)
	return 0, nil
}

// ownerOf is the holder's owner label, or "?" when it gave none.
func ownerOf(busy *APIError) string {
	if busy.Owner == nil {
		return "?"
	}
	return *busy.Owner
}

func envOr(key, fallback string) string {
	if value := os.Getenv(key); value != "" {
		return value
	}
	return fallback
}

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	os.Exit(code)
}
