// Package lockbrokertest starts a real redis-server and lockbroker on free
// loopback ports, for tests of code that uses the lockbroker client (and for
// this module's own tests).
//
//	redis, err := lockbrokertest.StartRedis()
//	defer redis.Stop()
//	broker, err := lockbrokertest.StartBroker(redis, nil)
//	defer broker.Stop()
//	client, err := lockbroker.NewClient(broker.URL, lockbroker.ClientOptions{})
//
// It needs redis-server on the PATH and the broker binary: LOCKBROKER_BIN, or
// target/debug/lockbroker in a directory above the working one (build it with
// `cargo build -p lockbroker-server`).
//
// With LOCKBROKER_TEST_MODE=quorum in the environment, StartBroker runs the
// broker in quorum mode over its Redis and two more started for that Redis
// (see Redis.QuorumNodes), so the same tests check a client against quorum
// mode's answers.
package lockbrokertest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BrokerBinary finds the broker binary: LOCKBROKER_BIN, else
// target/debug/lockbroker in the working directory or one above it.
func BrokerBinary() (string, error) {
	if path := os.Getenv("LOCKBROKER_BIN"); path != "" {
		return path, executable(path)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		path := filepath.Join(dir, "target", "debug", "lockbroker")
		if executable(path) == nil {
			return path, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no broker binary: run `cargo build -p lockbroker-server` or set LOCKBROKER_BIN")
		}
		dir = parent
	}
}

func executable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable", path)
	}
	return nil
}

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
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

// process is a child with its exit watched from the start.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func start(cmd *exec.Cmd) (*process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM (and SIGCONT, should it be paused), then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Redis is a redis-server that keeps nothing on disk.
type Redis struct {
	Port int
	dir  string
	proc *process

	// peers are the other two nodes of quorum mode's brokers, started on the
	// first QuorumNodes.
	peersOnce sync.Once
	peers     []*Redis
	peersErr  error
}

// URL is the redis:// URL of database 0.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// StartRedis starts a redis-server on a free port and waits until it answers.
func StartRedis() (*Redis, error) { return startRedis() }

// StartReplica starts a redis-server replicating primary and waits until its
// link to the primary is up (INFO replication: master_link_status:up) and it
// acknowledges the primary's writes (WAIT on the primary counts it).
func StartReplica(primary *Redis) (*Redis, error) {
	// The primary would otherwise wait 5 s for more replicas before a sync.
	if _, err := primary.inline("CONFIG SET repl-diskless-sync-delay 0"); err != nil {
		return nil, err
	}
	r, err := startRedis("--replicaof", "127.0.0.1", fmt.Sprint(primary.Port))
	if err != nil {
		return nil, err
	}
	if !waitUntil(10*time.Second, func() bool { return r.linkUp() && primary.replicasAcknowledge() }) {
		r.Stop()
		return nil, fmt.Errorf("the replica on port %d did not sync with port %d", r.Port, primary.Port)
	}
	return r, nil
}

func startRedis(extra ...string) (*Redis, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockbrokertest-redis-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir}, extra...)
	proc, err := start(exec.Command("redis-server", args...))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting redis-server (apt-get install redis-server): %w", err)
	}
	r := &Redis{Port: port, dir: dir, proc: proc}
	if !waitUntil(10*time.Second, r.pings) {
		r.Stop()
		return nil, fmt.Errorf("redis-server did not answer on port %d", port)
	}
	return r, nil
}

func (r *Redis) pings() bool {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.Port), time.Second)
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

// linkUp says whether a replica's link to its primary is up.
func (r *Redis) linkUp() bool {
	info, err := r.inline("INFO replication")
	return err == nil && strings.Contains(info, "master_link_status:up")
}

// replicasAcknowledge says whether a write on the primary is acknowledged by
// a replica within 100 ms (WAIT): for up to a second after a replica's link
// is up, the primary may not count it yet.
func (r *Redis) replicasAcknowledge() bool {
	acked, err := r.inline("SET lockbrokertest:probe 1", "DEL lockbrokertest:probe", "WAIT 1 100")
	return err == nil && acked != "0"
}

// inline sends inline commands on one connection and returns the answer to
// the last: a simple or bulk string, or an integer as text.
func (r *Redis) inline(commands ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.Port), time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte(strings.Join(commands, "\r\n") + "\r\n")); err != nil {
		return "", err
	}
	reader := bufio.NewReader(conn)
	var answer string
	for _, command := range commands {
		if answer, err = readAnswer(reader, command); err != nil {
			return "", err
		}
	}
	return answer, nil
}

func readAnswer(reader *bufio.Reader, command string) (string, error) {
	line, err := reader.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"), strings.HasPrefix(line, ":"):
		return line[1:], nil
	case strings.HasPrefix(line, "$"):
		var size int
		if _, err := fmt.Sscan(line[1:], &size); err != nil || size < 0 {
			return "", fmt.Errorf("redis answered %q to %s", line, command)
		}
		body := make([]byte, size+2)
		_, err := io.ReadFull(reader, body)
		return string(body[:size]), err
	default:
		return "", fmt.Errorf("redis answered %q to %s", line, command)
	}
}

// QuorumNodes lists the URLs of this server and two more, started on the
// first call and stopped with it: quorum mode's redis.nodes.
func (r *Redis) QuorumNodes() ([]string, error) {
	r.peersOnce.Do(func() {
		for len(r.peers) < 2 && r.peersErr == nil {
			var peer *Redis
			if peer, r.peersErr = startRedis(); r.peersErr == nil {
				r.peers = append(r.peers, peer)
			}
		}
	})
	if r.peersErr != nil {
		return nil, r.peersErr
	}
	return []string{r.URL(), r.peers[0].URL(), r.peers[1].URL()}, nil
}

// Pause stops the server with SIGSTOP: its port stays open, nothing answers,
// and a paused replica acknowledges no writes.
func (r *Redis) Pause() { _ = r.proc.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (r *Redis) Resume() { _ = r.proc.cmd.Process.Signal(syscall.SIGCONT) }

// Stop ends the server (resuming it first if paused), and its quorum peers;
// calling it again does nothing.
func (r *Redis) Stop() {
	r.proc.stop(5 * time.Second)
	os.RemoveAll(r.dir)
	for _, peer := range r.peers {
		peer.Stop()
	}
}

// Broker is a lockbroker process.
type Broker struct {
	// URL is the broker's base URL (https:// when it serves TLS).
	URL string
	// LogPath is the file with the broker's output.
	LogPath string
	proc    *process
}

// probe asks /readyz; it trusts any certificate, as it only waits for the
// broker to be ready.
var probe = &http.Client{Timeout: time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // readiness only
}}

// StartBroker starts the broker on a free port, pointed at redis, with extra
// LOCKBROKER_* settings in env, and waits until /readyz answers 200. It
// serves HTTPS when env sets LOCKBROKER_HTTP_TLS_CERT_PATH. With
// LOCKBROKER_TEST_MODE=quorum it runs in quorum mode over redis.QuorumNodes,
// unless env sets LOCKBROKER_REDIS_MODE.
func StartBroker(redis *Redis, env map[string]string) (*Broker, error) {
	binary, err := BrokerBinary()
	if err != nil {
		return nil, err
	}
	modeEnv, err := testModeEnv(redis, env)
	if err != nil {
		return nil, err
	}
	logFile, err := os.CreateTemp("", "lockbrokertest-broker-*.log")
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	scheme := "http"
	if env["LOCKBROKER_HTTP_TLS_CERT_PATH"] != "" {
		scheme = "https"
	}
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken before the bind
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(binary)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			fmt.Sprintf("LOCKBROKER_LISTEN=127.0.0.1:%d", port),
			"LOCKBROKER_REDIS_URL=" + redis.URL(),
			"LOCKBROKER_LOG_LEVEL=info",
		}
		cmd.Env = append(cmd.Env, modeEnv...)
		for key, value := range env {
			cmd.Env = append(cmd.Env, key+"="+value)
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		proc, err := start(cmd)
		if err != nil {
			return nil, err
		}
		b := &Broker{URL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, port), LogPath: logFile.Name(), proc: proc}
		if waitUntil(15*time.Second, b.ready) {
			return b, nil
		}
		proc.stop(time.Second)
	}
	logText, _ := os.ReadFile(logFile.Name())
	return nil, fmt.Errorf("lockbroker did not start; its log:\n%s", logText)
}

// testModeEnv is what LOCKBROKER_TEST_MODE adds to a broker's environment:
// for quorum, the mode and its nodes, each node's timeout the command timeout
// (as the Rust test harness sets them).
func testModeEnv(redis *Redis, env map[string]string) ([]string, error) {
	if os.Getenv("LOCKBROKER_TEST_MODE") != "quorum" || env["LOCKBROKER_REDIS_MODE"] != "" {
		return nil, nil
	}
	nodes, err := redis.QuorumNodes()
	if err != nil {
		return nil, err
	}
	timeout := env["LOCKBROKER_REDIS_COMMAND_TIMEOUT_MS"]
	if timeout == "" {
		timeout = "1000" // the broker's default
	}
	return []string{
		"LOCKBROKER_REDIS_MODE=quorum",
		"LOCKBROKER_REDIS_NODES=" + strings.Join(nodes, ","),
		"LOCKBROKER_REDIS_NODE_TIMEOUT_MS=" + timeout,
	}, nil
}

func (b *Broker) ready() bool {
	if !b.proc.running() {
		return false
	}
	response, err := probe.Get(b.URL + "/readyz")
	if err != nil {
		return false
	}
	response.Body.Close()
	return response.StatusCode == http.StatusOK
}

// Pause stops the process with SIGSTOP: its port stays open, nothing answers.
func (b *Broker) Pause() { _ = b.proc.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused broker.
func (b *Broker) Resume() { _ = b.proc.cmd.Process.Signal(syscall.SIGCONT) }

// ForceRelease ends whatever lease holds name, as an operator would
// (DELETE /v1/locks/{name}; needs a broker without API keys).
func (b *Broker) ForceRelease(name string) error {
	request, err := http.NewRequest(http.MethodDelete, b.URL+"/v1/locks/"+name, nil)
	if err != nil {
		return err
	}
	response, err := probe.Do(request)
	if err != nil {
		return err
	}
	response.Body.Close()
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("force release answered %d", response.StatusCode)
	}
	return nil
}

// Stop ends the broker (resuming it first if paused); calling it again does
// nothing.
func (b *Broker) Stop() {
	b.proc.stop(10 * time.Second)
	os.Remove(b.LogPath)
}
