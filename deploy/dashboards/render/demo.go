package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// demoProcess is `kvgate-lab demo` (what `make run` starts) running as a
// child process: simulated vLLM engines, the extproc with its in-memory
// index, a gateway and a trace replay through it.
type demoProcess struct {
	cmd   *exec.Cmd
	admin string        // the extproc's admin address (its /metrics)
	done  chan struct{} // closed when the process has exited
	err   error         // its exit error, after done
}

var adminRe = regexp.MustCompile(`Metrics and recent decisions: http://([^/\s]+)/metrics`)

// startDemo starts the demo with a replay of requests spread over span,
// and waits until it prints its extproc admin address.
func startDemo(ctx context.Context, kvgate string, requests int, span time.Duration, log io.Writer) (*demoProcess, error) {
	// --compare=false: the boards show the kvgate fleet's own replay, not
	// the idle minute while the demo's round-robin fleet replays first.
	cmd := exec.CommandContext(ctx, kvgate, "demo", "--exit", "--compare=false", "--listen", "127.0.0.1:0",
		"--requests", strconv.Itoa(requests), "--replay-duration", span.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s demo: %w", kvgate, err)
	}
	d := &demoProcess{cmd: cmd, done: make(chan struct{})}
	admin := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if m := adminRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case admin <- m[1]:
				default:
				}
			}
		}
		d.err = cmd.Wait()
		close(d.done)
	}()
	select {
	case d.admin = <-admin:
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("kvgate-lab demo exited before serving: %v", d.err)
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		return nil, fmt.Errorf("kvgate-lab demo printed no admin address within 2 minutes")
	}
}
