// Package redistest starts real redis-server processes (standalone or
// Cluster) on free loopback ports for tests and benchmarks. It never fakes
// Redis: the index's claims (no CROSSSLOT, failover, TTLs) only mean
// something against the real server.
//
// redis-server must be on PATH. A missing binary is an error, never a skip:
// CI installs it, and a silently skipped Redis suite proves nothing.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/lab/testkit/freeport"
)

// Options tunes a standalone server.
type Options struct {
	// ExtraArgs are appended to the redis-server command line
	// (e.g. "--maxmemory", "64mb"). "{dir}" and "{port}" in them are
	// replaced by the node's directory and port.
	ExtraArgs []string
	// StartTimeout bounds how long one start attempt waits for the server
	// to answer PING. Zero means 10s.
	StartTimeout time.Duration
}

// Server is one running redis-server process in standalone mode.
type Server struct {
	proc   *process
	client *redis.Client
	closed sync.Once
	opts   Options
}

// StartStandalone starts a standalone redis-server on a free loopback port.
// The caller must Close it.
func StartStandalone(ctx context.Context, opts Options) (*Server, error) {
	root, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	p, err := startProcess(ctx, root, opts.ExtraArgs, opts.StartTimeout)
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	p.ownsRoot = true
	return &Server{proc: p, client: redis.NewClient(clientOptions(p.addr)), opts: opts}, nil
}

// Restart kills the server and starts a new one on the same port and
// directory. Persistence is off (--save "", --appendonly no), so it comes
// back empty: what a Redis restarted without persistence looks like to
// its clients, which reconnect to the same address.
func (s *Server) Restart(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redistest: restart: %w", err)
	}
	old := s.proc
	old.kill()
	<-old.exited
	timeout := s.opts.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	p, err := launch(ctx, bin, old.root, old.port, s.opts.ExtraArgs, timeout)
	if err != nil {
		return fmt.Errorf("redistest: restart on port %d: %w", old.port, err)
	}
	p.ownsRoot = old.ownsRoot
	s.proc = p
	return nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.proc.addr }

// Client returns a client owned by the Server (closed by Close).
func (s *Server) Client() redis.UniversalClient { return s.client }

// NewClient returns a fresh client, as a second process would have; the
// caller closes it.
func (s *Server) NewClient() redis.UniversalClient {
	return redis.NewClient(clientOptions(s.proc.addr))
}

// Close kills the server and removes its temporary directory.
func (s *Server) Close() error {
	var err error
	s.closed.Do(func() {
		s.client.Close()
		err = s.proc.stop()
	})
	return err
}

func clientOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, DisableIdentity: true}
}

// process is one redis-server child.
type process struct {
	addr     string
	port     int
	dir      string // the node's --dir
	root     string // removed on stop when ownsRoot
	ownsRoot bool
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has been reaped
	waitErr  error
	killOnce sync.Once
}

// startAttempts bounds retries when the port picked for a server was taken
// by someone else between picking and binding.
const startAttempts = 5

// startProcess starts redis-server in a fresh sub-directory of root and
// waits until it answers PING.
func startProcess(ctx context.Context, root string, extra []string, timeout time.Duration) (*process, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found on PATH (install redis-server 7+): %w", err)
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		p, err := launch(ctx, bin, root, port, extra, timeout)
		if err == nil {
			return p, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("redistest: start redis-server after %d attempts: %w", startAttempts, lastErr)
}

func launch(ctx context.Context, bin, root string, port int, extra []string, timeout time.Duration) (*process, error) {
	dir := filepath.Join(root, "node-"+strconv.Itoa(port))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("redistest: node dir: %w", err)
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
	}
	args = append(args, extra...)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "{dir}", dir)
		args[i] = strings.ReplaceAll(args[i], "{port}", strconv.Itoa(port))
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: exec %s: %w", bin, err)
	}
	p := &process{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		port:   port,
		dir:    dir,
		root:   root,
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitReady(ctx, timeout); err != nil {
		p.kill()
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// waitReady polls PING until the server answers, it exits (e.g. the port
// was taken), ctx ends or timeout passes.
func (p *process) waitReady(ctx context.Context, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: p.addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("redis-server on port %d exited early (%v): %s", p.port, p.waitErr, p.logTail())
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redis-server on port %d: %w", p.port, ctx.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d not answering PING after %v: %v; log: %s", p.port, timeout, err, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail returns the end of the server's log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(filepath.Join(p.dir, "redis.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}

// kill sends SIGKILL and reaps the process; safe to call more than once.
func (p *process) kill() {
	p.killOnce.Do(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
	})
}

// alive reports whether the process is still running.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *process) stop() error {
	p.kill()
	var err error
	if p.ownsRoot {
		err = os.RemoveAll(p.root)
	} else {
		err = os.RemoveAll(p.dir)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("redistest: remove %s: %w", p.dir, err)
	}
	return nil
}
