// Package procs runs real kvgate processes for the end-to-end tests: it
// builds the binary once, starts subcommands on free loopback ports, waits
// for their readiness endpoints and stops them (SIGTERM, then SIGKILL), so
// the tests exercise exactly what an operator deploys.
package procs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StopGrace is how long a process may take to exit after SIGTERM before it
// is killed.
const StopGrace = 5 * time.Second

// maxCapturedBytes bounds the output kept per process: enough for the
// errors that explain a failure, not a whole verbose log.
const maxCapturedBytes = 1 << 20

// RepoRoot walks up from the working directory to the directory holding
// go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build compiles ./cmd/NAME (kvgate, the production processes, or
// kvgate-lab, the workshop: enginesim, gateway) into outDir and returns the
// binary's path.
func Build(outDir, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(outDir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, out)
	}
	return bin, nil
}

// capture is a bounded, concurrency-safe output buffer.
type capture struct {
	mu  sync.Mutex
	buf bytes.Buffer
	cut bool
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := maxCapturedBytes - c.buf.Len(); room < len(p) {
		c.buf.Write(p[:max(room, 0)])
		c.cut = true
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return c.buf.String() + "\n[output truncated]"
	}
	return c.buf.String()
}

// Proc is one running process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	out  *capture
	done chan struct{}
	err  error // set before done closes
}

// Start runs bin with args. The process is stopped in t.Cleanup, and its
// output goes to the test log if the test failed.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p, err := start(name, bin, args...)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("--- output of %s (%s %v):\n%s", name, filepath.Base(bin), args, p.Output())
		}
	})
	return p
}

func start(name, bin string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, cmd: exec.Command(bin, args...), out: &capture{}, done: make(chan struct{})}
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	setParentDeathSignal(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Output is what the process wrote to stdout and stderr so far.
func (p *Proc) Output() string { return p.out.String() }

// Exited is closed when the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Kill sends SIGKILL, as a crashed host would, and waits for the exit.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to StopGrace, then kills. Safe to call
// more than once.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(StopGrace):
		p.Kill()
	}
}

// WaitHTTP polls url until it answers 200, the process exits (an error
// carrying its output, e.g. a port taken between picking and binding) or
// ctx ends.
func (p *Proc) WaitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %s answered (%v); output:\n%s", p.Name, url, p.err, p.Output())
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not ready (last: %s): %w", p.Name, url, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Pid is the process id (for reading /proc/<pid>/status in soak tests).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }
