package lockbroker_test

// The test harness: TestMain starts one redis-server and broker for the package
// (and points LOCKBROKER_URL at it, for the examples); tests that pause, stop
// or configure a broker start their own.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
	"lockbroker.dev/lockbroker/lockbrokertest"
)

var (
	sharedRedis *lockbrokertest.Redis
	shared      *lockbrokertest.Broker
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if sharedRedis, err = lockbrokertest.StartRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer sharedRedis.Stop()
	if shared, err = lockbrokertest.StartBroker(sharedRedis, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Stop()
	os.Setenv("LOCKBROKER_URL", shared.URL)
	os.Unsetenv("LOCKBROKER_API_KEY")
	return m.Run()
}

// ownBroker starts a broker for one test (on the shared Redis unless given
// one), stopped when the test ends.
func ownBroker(t *testing.T, redis *lockbrokertest.Redis, env map[string]string) *lockbrokertest.Broker {
	t.Helper()
	if redis == nil {
		redis = sharedRedis
	}
	b, err := lockbrokertest.StartBroker(redis, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// ownRedis starts a Redis for one test, stopped when the test ends.
func ownRedis(t *testing.T) *lockbrokertest.Redis {
	t.Helper()
	r, err := lockbrokertest.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// ownReplica starts a replica of primary for one test, once its link is up;
// stopped (resumed first, if paused) when the test ends.
func ownReplica(t *testing.T, primary *lockbrokertest.Redis) *lockbrokertest.Redis {
	t.Helper()
	r, err := lockbrokertest.StartReplica(primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// newClient is a client of the shared broker.
func newClient(t *testing.T) *lockbroker.Client {
	t.Helper()
	return clientOf(t, shared.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second})
}

func clientOf(t *testing.T, url string, options lockbroker.ClientOptions) *lockbroker.Client {
	t.Helper()
	client, err := lockbroker.NewClient(url, options)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._:-]`)

// lockName is a lock name of the test's own.
func lockName(t *testing.T) string {
	base := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(base) > 60 {
		base = base[:60]
	}
	return fmt.Sprintf("%s-%d", base, time.Now().UnixNano()%1_000_000_000)
}

// forceRelease ends whatever lease holds name, as an operator would.
func forceRelease(t *testing.T, b *lockbrokertest.Broker, name string) {
	t.Helper()
	if err := b.ForceRelease(name); err != nil {
		t.Fatal(err)
	}
}

// keysFile writes an API keys file with one key of the given scopes and
// lock-name prefixes, and returns its path.
func keysFile(t *testing.T, key string, scopes, prefixes []string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(key))
	quote := func(items []string) string {
		return `["` + strings.Join(items, `", "`) + `"]`
	}
	text := fmt.Sprintf("[[keys]]\nid = \"go-tests\"\nsha256 = \"%s\"\nscopes = %s\nprefixes = %s\n",
		hex.EncodeToString(sum[:]), quote(scopes), quote(prefixes))
	path := filepath.Join(t.TempDir(), "keys.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// bg is a context for calls that the test does not cancel.
var bg = context.Background()
