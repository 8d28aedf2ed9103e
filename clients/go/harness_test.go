package lockbroker_test

// The test harness: a real redis-server and lockbroker on free loopback ports.
// TestMain starts one pair for the package (and points LOCKBROKER_URL at it, for
// the examples); tests that pause, stop or configure a broker start their own.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

var (
	workdir      string
	brokerBinary string
	sharedRedis  *redisServer
	shared       *broker
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	brokerBinary = os.Getenv("LOCKBROKER_BIN")
	if brokerBinary == "" {
		brokerBinary, _ = filepath.Abs("../../target/debug/lockbroker")
	}
	if info, err := os.Stat(brokerBinary); err != nil || info.Mode()&0o111 == 0 {
		fmt.Fprintf(os.Stderr, "no broker binary at %s: run `cargo build -p lockbroker-server` or set LOCKBROKER_BIN\n", brokerBinary)
		return 1
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "redis-server is not installed (apt-get install redis-server)")
		return 1
	}
	var err error
	if workdir, err = os.MkdirTemp("", "lockbroker-go-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(workdir)
	if sharedRedis, err = startRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer sharedRedis.stop()
	if shared, err = startBroker(sharedRedis, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.stop()
	os.Setenv("LOCKBROKER_URL", shared.url)
	os.Unsetenv("LOCKBROKER_API_KEY")
	return m.Run()
}

func freePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

// waitUntil polls check every 20 ms for up to timeout.
func waitUntil(timeout time.Duration, check func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if check() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// stopProcess sends SIGTERM, then SIGKILL after grace.
func stopProcess(cmd *exec.Cmd, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// redisServer is a redis-server that keeps nothing on disk.
type redisServer struct {
	port int
	cmd  *exec.Cmd
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func startRedis() (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(workdir, "redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	server := &redisServer{port: port, cmd: cmd}
	if !waitUntil(10*time.Second, server.pings) {
		server.stop()
		return nil, fmt.Errorf("redis-server did not answer on port %d", port)
	}
	return server, nil
}

func (r *redisServer) pings() bool {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.port), time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func (r *redisServer) stop() {
	stopProcess(r.cmd, 5*time.Second)
	r.cmd = nil
}

// broker is a lockbroker process pointed at a redisServer.
type broker struct {
	url    string
	cmd    *exec.Cmd
	log    string
	paused bool
}

// startBroker starts a broker with extra LOCKBROKER_* settings; it serves
// HTTPS when they name a certificate.
func startBroker(redis *redisServer, env map[string]string) (*broker, error) {
	logFile, err := os.CreateTemp(workdir, "broker-*.log")
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	scheme := "http"
	if env["LOCKBROKER_HTTP_TLS_CERT_PATH"] != "" {
		scheme = "https"
	}
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken before the bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(brokerBinary)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			fmt.Sprintf("LOCKBROKER_LISTEN=127.0.0.1:%d", port),
			"LOCKBROKER_REDIS_URL=" + redis.url(),
			"LOCKBROKER_LOG_LEVEL=info",
		}
		for key, value := range env {
			cmd.Env = append(cmd.Env, key+"="+value)
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		b := &broker{url: fmt.Sprintf("%s://127.0.0.1:%d", scheme, port), cmd: cmd, log: logFile.Name()}
		exited := make(chan struct{})
		go func() { _, _ = cmd.Process.Wait(); close(exited) }()
		if waitUntil(15*time.Second, func() bool { return b.listening(exited) }) {
			return b, nil
		}
		_ = cmd.Process.Kill()
	}
	logText, _ := os.ReadFile(logFile.Name())
	return nil, fmt.Errorf("lockbroker did not start; its log:\n%s", logText)
}

// probe asks /readyz; it trusts any certificate, as it only waits for the
// broker to be ready.
var probe = &http.Client{Timeout: time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // readiness only
}}

// listening is true once /readyz answers 200.
func (b *broker) listening(exited chan struct{}) bool {
	select {
	case <-exited:
		return false
	default:
	}
	response, err := probe.Get(b.url + "/readyz")
	if err != nil {
		return false
	}
	response.Body.Close()
	return response.StatusCode == http.StatusOK
}

// pause stops the process (SIGSTOP): the port stays open, nothing answers.
func (b *broker) pause() { _ = b.cmd.Process.Signal(syscall.SIGSTOP); b.paused = true }

func (b *broker) resume() { _ = b.cmd.Process.Signal(syscall.SIGCONT); b.paused = false }

func (b *broker) stop() {
	if b.cmd == nil {
		return
	}
	if b.paused {
		b.resume()
	}
	// Process.Wait already runs in startBroker's goroutine: signal, then poll.
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if !waitUntil(10*time.Second, func() bool { return b.cmd.Process.Signal(syscall.Signal(0)) != nil }) {
		_ = b.cmd.Process.Kill()
	}
	b.cmd = nil
}

// ownBroker starts a broker for one test (on the shared Redis unless given
// one), stopped when the test ends.
func ownBroker(t *testing.T, redis *redisServer, env map[string]string) *broker {
	t.Helper()
	if redis == nil {
		redis = sharedRedis
	}
	b, err := startBroker(redis, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.stop)
	return b
}

// ownRedis starts a Redis for one test, stopped when the test ends.
func ownRedis(t *testing.T) *redisServer {
	t.Helper()
	r, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	return r
}

// newClient is a client of the shared broker.
func newClient(t *testing.T) *lockbroker.Client {
	t.Helper()
	return clientOf(t, shared.url, lockbroker.ClientOptions{Timeout: 5 * time.Second})
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
func forceRelease(t *testing.T, url, name string) {
	t.Helper()
	request, _ := http.NewRequest(http.MethodDelete, url+"/v1/locks/"+name, nil)
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	if response.StatusCode != http.StatusOK {
		t.Fatalf("force release answered %d", response.StatusCode)
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
