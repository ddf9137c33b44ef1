package extproc

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// Issue 29, done-when 2, through real ext_proc streams: qwen3 in
// preprocess.mode engine, rendered by a real enginesim process (the pool's
// one vLLM worker; the two SGLang workers cannot render chats). A request
// lands on the worker holding the prefix kvgate's local rendering hashes,
// so the engine's tokens are exact. Then the engine process is killed: the
// next request is still routed (on load alone), counted as
// engine_unavailable. Then the engine is a socket that never answers: the
// request is routed once the call's timeout passes, counted as timeout.
func TestEngineModeRoutesExactlyAndSurvivesTheEngine(t *testing.T) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	labBin, err := procs.Build(t.TempDir(), "kvgate-lab")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	engine := procs.Start(t, "enginesim", labBin, "enginesim", "--listen", addr, "--model", "qwen3", "--tokenizer", dir,
		"--block-size", "16", "--gpu-blocks", "8192", "--drain", "1s", "--log-format", "text")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := engine.WaitHTTP(ctx, "http://"+addr+"/health"); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, func(c *config.Config) {
		c.Models[0].Preprocess.Mode = preprocess.ModeEngine
		c.Extproc.Preprocess.Engine.Timeout = yamlconf.Duration(500 * time.Millisecond) // generous: the machine is shared
		for i := range c.Engines {
			c.Engines[i].Kind = "sglang"
		}
		c.Engines = append(c.Engines, config.Engine{Endpoint: addr, Model: "qwen3", DPRanks: 1, Role: "both", Events: "tcp://127.0.0.1:1"})
	}, defaultHarnessConfig())
	r.withWorkers(t, append(append([]string(nil), workers...), addr)...)
	local, err := preprocess.New([]kvfleet.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}, preprocess.Options{})
	if err != nil {
		t.Fatal(err)
	}

	body := chatBody("qwen3", strings.Repeat("Plan the migration of the billing service, step by step. ", 20))
	want, err := local.Chat(body)
	if err != nil {
		t.Fatal(err)
	}
	holder := kvfleet.WorkerID{Endpoint: workers[1]}
	if err := r.idx.Store(context.Background(), holder, kvfleet.TierDevice, kvindex.ChainBlocks(want.Sequence)); err != nil {
		t.Fatal(err)
	}
	x, err := r.harness.Start(context.Background(), post(body))
	if err != nil {
		t.Fatal(err)
	}
	if x.Local != nil || x.Forward.Upstream != workers[1] {
		t.Fatalf("routed to %+v (local reply %+v), want the prefix holder %s", x.Forward, x.Local, workers[1])
	}
	finishResponse(t, x, workers[1])
	if st := r.reg.EngineRenderStats(); st.Calls != 1 || st.Fallbacks != [len(preprocess.EngineReasons)]uint64{} {
		t.Fatalf("engine render stats %+v: want one call, no fallback", st)
	}

	engine.Kill()
	routeApproximately(t, r, "Another request, after the engine died. ")
	if got := testutil.ToFloat64(r.router.metrics.approximate.WithLabelValues("engine_" + preprocess.EngineUnavailable)); got != 1 {
		t.Fatalf("untokenized{engine_unavailable} = %v, want 1", got)
	}

	// An engine that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn // kept open, unanswered, until the test ends
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	members := []kvfleet.Worker{{ID: kvfleet.WorkerID{Endpoint: ln.Addr().String()}, Model: "qwen3", Role: kvfleet.RoleBoth, Events: "tcp://127.0.0.1:1"}}
	for _, w := range workers {
		m := memberAt(w)
		m.Kind = "sglang"
		members = append(members, m)
	}
	if err := r.router.SetMembers(members); err != nil {
		t.Fatal(err)
	}
	r.withWorkers(t, append(append([]string(nil), workers...), ln.Addr().String())...)
	routeApproximately(t, r, "A request whose engine hangs. ")
	st := r.reg.EngineRenderStats()
	if st.Fallbacks[0] != 1 || st.Fallbacks[1] != 1 || st.Calls != 3 {
		t.Fatalf("engine render stats %+v: want 3 calls, 1 timeout, 1 unavailable", st)
	}
}

// routeApproximately sends a fresh chat and requires it routed (a
// forward, not a local reply) without a prefix key.
func routeApproximately(t *testing.T, r *rig, text string) {
	t.Helper()
	x, err := r.harness.Start(context.Background(), post(chatBody("qwen3", strings.Repeat(text, 10))))
	if err != nil {
		t.Fatal(err)
	}
	if x.Local != nil || x.Forward == nil || x.Forward.Upstream == "" {
		t.Fatalf("not routed: %+v", x.Local)
	}
	finishResponse(t, x, x.Forward.Upstream)
}
