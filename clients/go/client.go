package lockbroker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The defaults, the same as the Python client's. Nothing means "forever".
const (
	// DefaultURL is the broker a client from the environment talks to when
	// LOCKBROKER_URL is unset.
	DefaultURL = "http://127.0.0.1:7700"
	// DefaultTTL is the TTL of a lease when none is given.
	DefaultTTL = 30 * time.Second
	// DefaultMaxHold is how long Lock keeps renewing a lease at most.
	DefaultMaxHold = time.Hour
	// DefaultTimeout bounds one HTTP exchange (a waiting acquire gets its wait
	// on top).
	DefaultTimeout = 10 * time.Second
)

// maxAnswer is the largest answer body read from the broker.
const maxAnswer = 1 << 20

// ClientOptions are the optional settings of a Client.
type ClientOptions struct {
	// APIKey is sent as "Authorization: Bearer <key>" when set.
	APIKey string
	// Timeout bounds every HTTP exchange; 0 means DefaultTimeout.
	Timeout time.Duration
	// CACertFile names a PEM file of CA certificates trusted for https://
	// brokers, on top of the system's roots.
	CACertFile string
	// TLSConfig, when set, is the TLS configuration as is (CACertFile is then
	// added to its RootCAs).
	TLSConfig *tls.Config
	// HTTPClient, when set, does the HTTP; Timeout and the TLS settings are
	// then up to it. Its own Timeout must leave room for waiting acquires.
	HTTPClient *http.Client
}

// Client talks to one broker. It is safe for concurrent use.
type Client struct {
	base    string
	apiKey  string
	timeout time.Duration
	http    *http.Client
}

// NewClient is a client for the broker at url ("http://host:port", or
// "https://host/prefix" behind a reverse proxy).
func NewClient(url string, options ClientOptions) (*Client, error) {
	base := strings.TrimRight(url, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("lockbroker: the broker URL must start with http:// or https://, not %q", url)
	}
	if options.Timeout < 0 {
		return nil, errors.New("lockbroker: Timeout must not be negative")
	}
	timeout := options.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	client := &Client{base: base, apiKey: options.APIKey, timeout: timeout, http: options.HTTPClient}
	if client.http == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		tlsConfig, err := tlsSettings(options)
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig = tlsConfig
		// Every call carries its own deadline (see call); no client-wide one.
		client.http = &http.Client{Transport: transport}
	}
	return client, nil
}

// NewClientFromEnv is a client for LOCKBROKER_URL (default DefaultURL) with the
// key in LOCKBROKER_API_KEY, if set. options.APIKey, when set, wins.
func NewClientFromEnv(options ClientOptions) (*Client, error) {
	url := os.Getenv("LOCKBROKER_URL")
	if url == "" {
		url = DefaultURL
	}
	if options.APIKey == "" {
		options.APIKey = os.Getenv("LOCKBROKER_API_KEY")
	}
	return NewClient(url, options)
}

func tlsSettings(options ClientOptions) (*tls.Config, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if options.TLSConfig != nil {
		config = options.TLSConfig.Clone()
	}
	if options.CACertFile == "" {
		return config, nil
	}
	pem, err := os.ReadFile(options.CACertFile)
	if err != nil {
		return nil, fmt.Errorf("lockbroker: reading the CA certificates: %w", err)
	}
	if config.RootCAs == nil {
		if config.RootCAs, err = x509.SystemCertPool(); err != nil {
			config.RootCAs = x509.NewCertPool()
		}
	}
	if !config.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("lockbroker: no PEM certificate in %s", options.CACertFile)
	}
	return config, nil
}

// AcquireOptions are the optional arguments of an acquire. Durations are
// rounded to whole milliseconds on the wire.
type AcquireOptions struct {
	// TTL is how long the lease is valid; 0 means DefaultTTL.
	TTL time.Duration
	// Wait is how long to wait for a busy lock; 0 answers LockBusy at once.
	// Waits longer than the broker's cap (60 s by default) are asked again
	// until Wait is over.
	Wait time.Duration
	// Owner labels the holder in LockBusy answers and Status; "" means
	// "host:pid".
	Owner string
	// RequestID makes retries safe: an acquire re-sent with the same RequestID
	// (and Owner) while its lease is held gets that same lease. "" means a
	// fresh random one, used for every retry of this call.
	RequestID string
	// LockDelay keeps the lock unavailable that long after this lease expires
	// unreleased. 0 leaves the broker's default; NoLockDelay asks for none.
	LockDelay time.Duration
	// Fair queues the wait in Redis, so waiters are granted in arrival order
	// across every broker sharing it.
	Fair bool
	// Shared asks for a shared lease: granted beside other shared leases, kept
	// out only by an exclusive one. Not for permits.
	Shared bool
	// Session is the token of an open session to take the lease under
	// (Session.Token, or sent as "session"): the lease then takes its TTL and
	// lock-delay from the session (leave TTL and LockDelay unset), every
	// keepalive of the session renews it, and it ends with the session.
	// Such a lease is never extended on its own and has no local deadline of
	// its own. Session.Acquire sets it and follows the session's keepalives;
	// a session that is not open gets *SessionLost, a full one *SessionFull.
	Session string
}

// NoLockDelay as AcquireOptions.LockDelay asks for no lock-delay even when the
// broker's default is another.
const NoLockDelay time.Duration = -1

// LockStatus is a lock's state as GET /v1/locks/{name} reports it. It never
// holds a token.
type LockStatus struct {
	Name string
	Held bool
	// Owner is the holder's label, while held.
	Owner string
	// Fence is the last fence issued for the lock; 0 when none is remembered.
	Fence int64
	// ExpiresIn is how long the current lease stays valid (0 when not held).
	ExpiresIn time.Duration
	// AvailableIn is how long until an exclusive acquire could succeed at the
	// earliest.
	AvailableIn time.Duration
	// Mode is how the lock is held now: ModeExclusive, ModeShared, or "" when
	// it is not held.
	Mode string
	// Holders lists every valid lease of the lock, at most 100.
	Holders []Holder
	// HolderCount counts every valid lease, those beyond the 100 listed too.
	HolderCount int
	// Waiting counts the requests waiting for the lock (see openapi.yaml).
	Waiting int
}

// Renewal is the broker's answer to an extend: the same fence, a new expiry.
type Renewal struct {
	Name  string
	Fence int64
	// TTL is the lease's remaining validity, from the answer.
	TTL time.Duration
	// ExpiresAtMs is the expiry in Unix milliseconds of the broker's clock.
	ExpiresAtMs int64
	Owner       string
}

// leaseAnswer is the JSON of a grant, and (without the token) of a renewal.
type leaseAnswer struct {
	Name        string  `json:"name"`
	Token       string  `json:"token"`
	Fence       int64   `json:"fence"`
	TTLMs       int64   `json:"ttl_ms"`
	ExpiresAtMs int64   `json:"expires_at_ms"`
	Owner       *string `json:"owner"`
	Limit       int     `json:"limit"`
}

func (a *leaseAnswer) owner() string {
	if a.Owner == nil {
		return ""
	}
	return *a.Owner
}

// Acquire takes the lock name, waiting up to options.Wait for it. Nothing renews
// the lease: call Lease.Extend in time, or use Lock.
//
// It returns *LockBusy when the lock is still held after the wait, and
// *Unavailable when the broker could not be reached or could not serve
// before the wait was over (such failures are retried until then with the
// same request_id, so a retry never takes a second lease).
func (c *Client) Acquire(ctx context.Context, name string, options AcquireOptions) (*Lease, error) {
	request, err := newAcquire(name, options)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, request)
}

// Extend sets the remaining TTL of the lease token holds to ttl (replace, not
// add). Errors: ErrLeaseLost (a *LeaseLost), *MaxHoldExceeded.
func (c *Client) Extend(ctx context.Context, name, token string, ttl time.Duration) (*Renewal, error) {
	return c.extendOn(ctx, lockRoutes, name, token, ttl)
}

func (c *Client) extendOn(ctx context.Context, routes, name, token string, ttl time.Duration) (*Renewal, error) {
	if ttl <= 0 {
		return nil, errors.New("lockbroker: ttl must be positive")
	}
	var answer leaseAnswer
	if err := c.extend(ctx, routes, name, token, ttl, &answer); err != nil {
		return nil, err
	}
	return &Renewal{Name: answer.Name, Fence: answer.Fence, TTL: millis(answer.TTLMs),
		ExpiresAtMs: answer.ExpiresAtMs, Owner: answer.owner()}, nil
}

// Release gives the lock back at once and returns the lease's fence. A token
// that no longer holds the lease gets ErrLeaseLost (a *LeaseLost).
func (c *Client) Release(ctx context.Context, name, token string) (int64, error) {
	answer, err := c.release(ctx, lockRoutes, name, token)
	if err != nil {
		return 0, err
	}
	return answer.Fence, nil
}

// releaseAnswer is the JSON of a release. Acknowledged is nil unless the
// broker waits for Redis replicas (redis.min_replicas_acked above 0).
type releaseAnswer struct {
	Fence        int64 `json:"fence"`
	Acknowledged *bool `json:"acknowledged"`
}

func (c *Client) release(ctx context.Context, routes, name, token string) (*releaseAnswer, error) {
	var answer releaseAnswer
	body := map[string]any{"token": token}
	if err := c.call(ctx, http.MethodPost, routePath(routes, name, "release"), body, 0, &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// Status reads the lock's state (holder, last fence, expiry).
func (c *Client) Status(ctx context.Context, name string) (*LockStatus, error) {
	var answer statusAnswer
	if err := c.call(ctx, http.MethodGet, lockPath(name, ""), nil, 0, &answer); err != nil {
		return nil, err
	}
	return answer.status(), nil
}

func (c *Client) extend(ctx context.Context, routes, name, token string, ttl time.Duration, out *leaseAnswer) error {
	body := map[string]any{"token": token, "ttl_ms": wireMillis(ttl)}
	return c.call(ctx, http.MethodPost, routePath(routes, name, "extend"), body, 0, out)
}

// call makes one exchange with a deadline of the client's timeout plus extra,
// and decodes a 2xx answer into out or returns the matching error.
func (c *Client) call(ctx context.Context, method, path string, body any, extra time.Duration, out any) error {
	return c.callKeyed(ctx, method, path, body, extra, "", out)
}

func (c *Client) callKeyed(ctx context.Context, method, path string, body any, extra time.Duration,
	idempotencyKey string, out any) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.timeout+extra)
	defer cancel()
	var payload io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return err
		}
		payload = bytes.NewReader(encoded)
	}
	request, err := http.NewRequestWithContext(ctx, method, c.base+path, payload)
	if err != nil {
		return err
	}
	request.Header.Set("Accept", "application/json")
	request.Header.Set("User-Agent", "lockbroker-go/"+Version)
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
		// Marks the POST as safe to re-send, so net/http retries it on a fresh
		// connection when a pooled one turns out closed by the broker.
		if idempotencyKey == "" {
			idempotencyKey = newRequestID()
		}
		request.Header.Set("Idempotency-Key", idempotencyKey)
	}
	if c.apiKey != "" {
		request.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	response, err := c.http.Do(request)
	if err != nil {
		if parent.Err() != nil {
			return parent.Err() // the caller gave up: not the broker's doing
		}
		return transportError(c.base, unwrapURLError(err))
	}
	defer response.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(response.Body, maxAnswer))
	if err != nil {
		return transportError(c.base, err)
	}
	if response.StatusCode < 200 || response.StatusCode > 299 {
		var wrapped struct {
			Error *errorBody `json:"error"`
		}
		_ = json.Unmarshal(raw, &wrapped) // a proxy's HTML page types by status
		return errorFromAnswer(response.StatusCode, wrapped.Error, response.Header.Get("Retry-After"))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &BrokerError{Status: response.StatusCode, Code: "bad_response",
			Message: "the broker answered with a body that is not the expected JSON", cause: err}
	}
	return nil
}

// unwrapURLError drops net/http's *url.Error wrapper, whose text repeats the
// URL; the cause (a timeout, a refused connection) is what matters.
func unwrapURLError(err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err
	}
	return err
}

// The two families of lease routes: a lock's and a semaphore's.
const (
	lockRoutes      = "/v1/locks/"
	semaphoreRoutes = "/v1/semaphores/"
)

// lockPath is /v1/locks/{name}[/action] with the name escaped.
func lockPath(name, action string) string { return routePath(lockRoutes, name, action) }

// routePath is routes + {name}[/action] with the name escaped.
func routePath(routes, name, action string) string {
	path := routes + url.PathEscape(name)
	if action != "" {
		path += "/" + action
	}
	return path
}

// wireMillis is a duration as whole milliseconds, at least 1.
func wireMillis(d time.Duration) int64 {
	ms := (d + time.Millisecond/2) / time.Millisecond
	if ms < 1 {
		return 1
	}
	return int64(ms)
}

func newRequestID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("lockbroker: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	owner := fmt.Sprintf("%s:%d", host, os.Getpid())
	if len(owner) > 256 {
		owner = owner[:256]
	}
	return owner
}
