package baton_test

// The test harness: real baton-sidecar processes on the ensembles sdk/test.sh started
// (sdk/testenv.sh), and a TCP proxy that cuts a sidecar off from its ensemble.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// bound is how long any one wait in these tests may take before the test fails.
const bound = 60 * time.Second

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the tests with sdk/test.sh, which starts the ensembles", name)
	}
	return v
}

var counter atomic.Int64

// unique is a name no other test or earlier run uses (the ensembles are shared).
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000_000, counter.Add(1))
}

// sidecar is a running baton-sidecar process, killed when the test ends.
type sidecar struct {
	t        *testing.T
	identity string
	addr     string
	cmd      *exec.Cmd
	mu       sync.Mutex
	cond     *sync.Cond
	lines    []string
	exited   chan struct{}
	state    *os.ProcessState
}

// startSidecar starts a sidecar on ensemble (BATON_SDK_ENSEMBLE when ""), standing in
// elections, and waits until it serves HTTP and has a session.
func startSidecar(t *testing.T, ensemble, identity string, elections []string, extra ...string) *sidecar {
	t.Helper()
	if ensemble == "" {
		ensemble = env(t, "BATON_SDK_ENSEMBLE")
	}
	listen := "127.0.0.1:0"
	if i := indexOf(extra, "--listen"); i >= 0 && i+1 < len(extra) {
		listen = extra[i+1]
		extra = append(append([]string{}, extra[:i]...), extra[i+2:]...)
	}
	args := []string{"--ensemble", ensemble, "--listen", listen, "--identity", identity}
	if !contains(extra, "--session-timeout") {
		args = append(args, "--session-timeout", "10s")
	}
	for _, e := range elections {
		args = append(args, "--election", e)
	}
	args = append(args, extra...)
	cmd := exec.Command(env(t, "BATON_SIDECAR_BIN"), args...)
	cmd.Env = append(os.Environ(), "BATON_LOG=info,baton_sidecar=debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start baton-sidecar: %v", err)
	}
	s := &sidecar{t: t, identity: identity, cmd: cmd, exited: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.collect(stderr)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("%s's log:\n%s", identity, s.log())
		}
	})
	line := s.waitLog("serving the HTTP API")
	for _, word := range strings.Fields(line) {
		if a, ok := strings.CutPrefix(word, "addr="); ok {
			s.addr = a
		}
	}
	if s.addr == "" {
		t.Fatalf("no address in %q", line)
	}
	s.waitLog("recipe::session: session established")
	return s
}

func indexOf(list []string, want string) int {
	for i, s := range list {
		if s == want {
			return i
		}
	}
	return -1
}

func contains(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}

func (s *sidecar) collect(stderr io.Reader) {
	lines := bufio.NewScanner(stderr)
	lines.Buffer(make([]byte, 1<<16), 1<<20)
	for lines.Scan() {
		s.mu.Lock()
		s.lines = append(s.lines, lines.Text())
		s.cond.Broadcast()
		s.mu.Unlock()
	}
	state, _ := s.cmd.Process.Wait()
	s.mu.Lock()
	s.state = state
	s.cond.Broadcast()
	s.mu.Unlock()
	close(s.exited)
}

// waitLog waits (on the log as it is written) for a line containing needle.
func (s *sidecar) waitLog(needle string) string {
	s.t.Helper()
	timer := time.AfterFunc(bound, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(bound)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for _, l := range s.lines {
			if strings.Contains(l, needle) {
				return l
			}
		}
		if s.state != nil || time.Now().After(deadline) {
			s.t.Fatalf("%s: no log line with %q (exited: %v):\n%s", s.identity, needle, s.state, strings.Join(s.lines, "\n"))
		}
		s.cond.Wait()
	}
}

func (s *sidecar) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

func (s *sidecar) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v to %s: %v", sig, s.identity, err)
	}
}

// waitExit waits (bounded) for the process to end and returns how it ended.
func (s *sidecar) waitExit() *os.ProcessState {
	s.t.Helper()
	select {
	case <-s.exited:
	case <-time.After(bound):
		s.t.Fatalf("%s did not exit", s.identity)
	}
	return s.state
}

// proxy forwards a local port to target until cut: then it closes every connection and
// refuses new ones, as a network partition between a sidecar and its ensemble would.
type proxy struct {
	addr     string
	target   string
	listener net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	cut      bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String(), target: target, listener: l}
	t.Cleanup(func() { l.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

// setCut cuts (true) or heals (false) the link.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}
