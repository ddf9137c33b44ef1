package main

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"
)

// testProc is a child process with its stdout and stderr kept apart: a
// kvgate process announces itself on stdout and logs on stderr.
type testProc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr *logbuffer.Buffer
	done           chan struct{}
	err            error // set before done closes
}

// startProc runs argv in dir; env is added to the test's environment.
// The process is stopped (SIGTERM, then SIGKILL) at cleanup and its output
// logged if the test failed.
func startProc(t *testing.T, name, dir string, env []string, argv ...string) *testProc {
	t.Helper()
	p := &testProc{name: name, cmd: exec.Command(argv[0], argv[1:]...), stdout: &logbuffer.Buffer{}, stderr: &logbuffer.Buffer{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	setParentDeathSignal(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(5 * time.Second)
		if t.Failed() {
			t.Logf("--- %s (%v) stdout:\n%s\n--- stderr:\n%s", name, argv, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// waitOutput waits until the stream matches re; the process exiting first,
// or the deadline passing, fails the test.
func (p *testProc) waitOutput(t *testing.T, stream *logbuffer.Buffer, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if m := re.FindStringSubmatch(stream.String()); m != nil {
			return m
		}
		select {
		case <-p.done:
			if m := re.FindStringSubmatch(stream.String()); m != nil {
				return m
			}
			t.Fatalf("%s exited (%v) before printing %q", p.name, p.err, re)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q within %v", p.name, re, within)
		}
	}
}

// exitCode waits for the process to end and returns its exit status.
func (p *testProc) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s still running after %v", p.name, within)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

func (p *testProc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// stop sends SIGTERM, waits up to grace, then kills.
func (p *testProc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.done
	}
}
