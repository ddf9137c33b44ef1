package kvstream

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// systemPython is Debian's interpreter; python3-zmq installs pyzmq (and
// libzmq, the library vLLM's publisher runs on) for it, not for a pyenv.
const systemPython = "/usr/bin/python3"

// pyPublisher drives testdata/vllm_publisher.py.
type pyPublisher struct {
	stdin  io.WriteCloser
	seqs   chan uint64
	info   struct{ Pub, Replay, Zmq, Pyzmq string }
	sent   map[uint64]string
	cmd    *exec.Cmd
	stderr *strings.Builder
}

func startPyPublisher(t *testing.T, args ...string) *pyPublisher {
	t.Helper()
	if out, err := exec.Command(systemPython, "-c", "import zmq").CombinedOutput(); err != nil {
		t.Fatalf("the libzmq interop test needs %s with pyzmq (Debian: apt-get install -y python3-zmq): %v\n%s", systemPython, err, out)
	}
	cmd := exec.Command(systemPython, append([]string{"testdata/vllm_publisher.py"}, args...)...)
	p := &pyPublisher{cmd: cmd, seqs: make(chan uint64, 1024), sent: map[uint64]string{}, stderr: &strings.Builder{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", systemPython, err)
	}
	t.Cleanup(func() {
		fmt.Fprintln(p.stdin, "quit")
		p.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("vllm_publisher.py: %v\nstderr:\n%s", err, p.stderr)
			}
		case <-time.After(hangGuard):
			cmd.Process.Kill()
			t.Errorf("vllm_publisher.py did not exit")
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("vllm_publisher.py printed no endpoints; stderr:\n%s", p.stderr)
	}
	if err := json.Unmarshal(lines.Bytes(), &p.info); err != nil {
		t.Fatalf("vllm_publisher.py endpoints line %q: %v", lines.Text(), err)
	}
	t.Logf("libzmq %s, pyzmq %s", p.info.Zmq, p.info.Pyzmq)
	go func() {
		defer close(p.seqs)
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) == 2 && f[0] == "seq" {
				if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					p.seqs <- n
				}
			}
		}
	}()
	return p
}

// publish sends one command and returns the seq the script assigned.
func (p *pyPublisher) publish(t *testing.T, live bool, payload string) uint64 {
	t.Helper()
	kind := "skip"
	if live {
		kind = "live"
	}
	if _, err := fmt.Fprintf(p.stdin, "%s %s\n", kind, payload); err != nil {
		t.Fatalf("write to vllm_publisher.py: %v", err)
	}
	select {
	case seq, ok := <-p.seqs:
		if !ok {
			t.Fatalf("vllm_publisher.py exited; stderr:\n%s", p.stderr)
		}
		p.sent[seq] = payload
		return seq
	case <-time.After(hangGuard):
		t.Fatalf("vllm_publisher.py did not answer")
		return 0
	}
}

// probeUntilDelivered publishes live probes until the subscriber has
// received something (ZMQ's slow joiner drops what goes out before the
// subscription reaches the publisher).
func (p *pyPublisher) probeUntilDelivered(t *testing.T, r *recorder, s *Subscriber) {
	t.Helper()
	deadline := time.After(hangGuard)
	for i := 0; len(r.snapshot()) == 0; i++ {
		p.publish(t, true, fmt.Sprintf("probe-%d", i))
		select {
		case <-r.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no batch from the pyzmq publisher; stats %+v; stderr:\n%s", s.Stats(), p.stderr)
		}
	}
}

// checkDeliveredInOrder waits for seq last and requires seqs 0..last
// exactly once, in order, with the payloads sent.
func (p *pyPublisher) checkDeliveredInOrder(t *testing.T, r *recorder, last uint64) {
	t.Helper()
	ev := r.waitForSeq(t, last)
	if len(ev) != int(last)+1 {
		t.Fatalf("want seqs 0..%d exactly once in order, got %v", last, ev)
	}
	for i, e := range ev {
		if e.reset || e.seq != uint64(i) || e.payload != p.sent[uint64(i)] {
			t.Fatalf("event %d is %v (payload %q), want seq %d payload %q; all: %v", i, e, e.payload, i, p.sent[uint64(i)], ev)
		}
	}
}

// TestInteropWithPyzmqPublisher checks the Subscriber against libzmq
// through pyzmq, framed as vLLM frames it, in both replay layouts (v0.26
// with the topic frame, and the older one SGLang still uses): a late-join
// catch-up and a mid-stream gap are both repaired through the pyzmq ROUTER.
func TestInteropWithPyzmqPublisher(t *testing.T) {
	for _, c := range []struct{ topic, layout string }{
		{"", "v0.26"}, {"kv@10.0.0.1@qwen3", "v0.26"}, {"", "legacy"}, {"kv-events", "legacy"},
	} {
		topic := c.topic
		t.Run(fmt.Sprintf("topic %q layout %s", topic, c.layout), func(t *testing.T) {
			py := startPyPublisher(t, "--topic", topic, "--replay-layout", c.layout)
			// Missed before we joined: the catch-up must fetch them.
			for i := range 3 {
				py.publish(t, false, fmt.Sprintf("before-%d", i))
			}
			r := newRecorder()
			s := runSubscriber(t, Config{Endpoint: py.info.Pub, ReplayEndpoint: py.info.Replay, Topic: topic}, r)

			py.probeUntilDelivered(t, r, s)
			anchor := py.publish(t, true, "anchor")
			r.waitForSeq(t, anchor)
			py.publish(t, false, "gap-1")
			py.publish(t, false, "gap-2")
			last := py.publish(t, true, "after-gap")

			py.checkDeliveredInOrder(t, r, last)
			st := s.Stats()
			if st.GapsDetected != 2 || st.GapsRepaired != 2 || st.Resets != 0 || st.ReplayFailures != 0 || st.MalformedDropped != 0 {
				t.Errorf("want the late join and the gap both repaired, nothing else; got %+v", st)
			}
		})
	}
}

// Bind mode against libzmq: the pyzmq publisher connects its PUB to
// kvgate's bound socket (as vLLM does with a non-wildcard endpoint) and
// serves replay in either layout; catch-up and a gap are repaired.
func TestInteropBindModeWithPyzmqPublisher(t *testing.T) {
	for _, layout := range []string{"v0.26", "legacy"} {
		t.Run(layout, func(t *testing.T) {
			l := startListener(t)
			topic := "kv@10.0.0.1@qwen3"
			py := startPyPublisher(t, "--topic", topic, "--replay-layout", layout, "--connect", "tcp://"+l.Addr().String())
			py.publish(t, false, "before-0")
			r := newRecorder()
			s := runSubscriber(t, Config{Listener: l, Topic: topic, Publishers: loopbackPublisher, ReplayEndpoint: py.info.Replay}, r)
			py.probeUntilDelivered(t, r, s)
			py.publish(t, false, "gap")
			last := py.publish(t, true, "after-gap")
			py.checkDeliveredInOrder(t, r, last)
			if st := s.Stats(); st.Resets != 0 || st.MalformedDropped != 0 || st.GapsUnrepaired != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}
