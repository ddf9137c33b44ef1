package benchmarks

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// decisionRig is the decision-overhead bench's request path (same config,
// same prompts as Extproc) for go test benchmarks and pprof.
type decisionRig struct {
	router *extproc.Router
	prompt map[string][]byte
}

func newDecisionRig(tb testing.TB) *decisionRig {
	return newDecisionRigOn(tb, kvindex.NewMemory(kvindex.MemoryConfig{}))
}

// newDecisionRigOn is newDecisionRig over idx (a Redis index for the
// shared-index rows of issue 27).
func newDecisionRigOn(tb testing.TB, idx kvindex.Index) *decisionRig {
	tb.Helper()
	cfg, reg, err := decisionFleet(16)
	if err != nil {
		tb.Fatal(err)
	}
	workers, err := cfg.Workers()
	if err != nil {
		tb.Fatal(err)
	}
	// The benchmark measures a match, not the fallback past
	// index_timeout (50 ms), which a Redis match on a loaded machine can
	// reach: the decision would then route on load alone and fail below.
	cfg.Extproc.IndexTimeout = yamlconf.Duration(5 * time.Second)
	router, err := extproc.NewRouter(extproc.RouterConfig{Extproc: cfg.Extproc, Workers: workers}, reg, idx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	d := &decisionRig{router: router, prompt: map[string][]byte{}}
	for _, p := range decisionPrompts() {
		if p.short == "" {
			continue
		}
		res, err := reg.Chat(p.body)
		if err != nil {
			tb.Fatal(err)
		}
		if err := idx.Store(context.Background(), kvfleet.WorkerID{Endpoint: "10.1.0.3:8000"}, kvfleet.TierDevice, kvindex.ChainBlocks(res.Sequence)); err != nil {
			tb.Fatal(err)
		}
		d.prompt[p.short] = p.body
	}
	return d
}

// processCPU is the CPU time (user + system) the whole process has used:
// on a loaded machine wall-clock ns/op measures the neighbours, CPU per
// operation measures the code (GC and the gRPC goroutines included).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op, measured since start, to b's results.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRoute is Router.Decide alone (parse → template → tokenize → hash
// → match → pick) on the bench's prompts: what pprof should look at.
func BenchmarkRoute(b *testing.B) {
	benchRoute(b, newDecisionRig(b))
}

// BenchmarkRouteRedisCluster is BenchmarkRoute over the Redis index on a
// real 3-master Cluster (redis-server processes on loopback), the index the
// decision-overhead table's redis-cluster rows use: its -cpuprofile splits
// what a shared index adds to a decision (issue 27's Cluster rows).
func BenchmarkRouteRedisCluster(b *testing.B) {
	ctx := context.Background()
	cluster, err := redistest.StartCluster(ctx, redistest.ClusterOptions{Masters: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	idx, err := kvindex.NewRedis(ctx, kvindex.RedisConfig{Client: cluster.Client()})
	if err != nil {
		b.Fatal(err)
	}
	benchRoute(b, newDecisionRigOn(b, idx))
}

func benchRoute(b *testing.B, d *decisionRig) {
	for _, size := range []string{"1k", "8k", "32k"} {
		b.Run(size, func(b *testing.B) {
			req := &server.Request{Method: "POST", Path: "/v1/chat/completions", Body: d.prompt[size],
				Headers: map[string]string{"content-type": "application/json"}}
			ctx := context.Background()
			b.ReportAllocs()
			cpu := processCPU(b)
			for b.Loop() {
				dec, rerr := d.router.Decide(ctx, req)
				if rerr != nil {
					b.Fatalf("route: %d %s", rerr.Status, rerr.Body)
				}
				if dec.Endpoint != "10.1.0.3:8000" {
					b.Fatalf("routed to %s, want the prefix holder", dec.Endpoint)
				}
				if dec.Ticket != nil {
					dec.Ticket.Finish(server.OutcomeOK)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkDecisionExtproc is one decision through the ext_proc gRPC
// stream, as Extproc measures it (headers sent → routing headers back), for
// kvgate's router and for the protocol floor (a round-robin router that
// parses nothing) on the same prompts: cpu-ns/op minus the floor's is the
// CPU kvgate adds to a decision (client, server and GC together).
func BenchmarkDecisionExtproc(b *testing.B) {
	d := newDecisionRig(b)
	for _, r := range []struct {
		name   string
		router server.Decider
	}{{"kvgate", d.router}, {"floor", &roundRobinDecider{endpoints: []string{"10.1.0.1:8000", "10.1.0.2:8000"}}}} {
		b.Run(r.name, func(b *testing.B) { benchDecisions(b, d, r.router) })
	}
}

func benchDecisions(b *testing.B, d *decisionRig, router server.Decider) {
	srv, err := server.New(router, server.Config{MaxBodyBytes: 8 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(ln)
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	h, err := envoyharness.New(conn, envoyharness.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []string{"1k", "8k", "32k"} {
		b.Run(size, func(b *testing.B) {
			req := &envoyharness.Request{Method: "POST", Path: "/v1/chat/completions", Body: d.prompt[size],
				Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}, {Name: "content-length", Value: strconv.Itoa(len(d.prompt[size]))}}}
			ctx := context.Background()
			b.ReportAllocs()
			cpu := processCPU(b)
			for b.Loop() {
				x, err := h.Start(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if x.Forward == nil {
					b.Fatalf("not routed: %+v", x.Local)
				}
				x.Cancel()
				<-x.Done()
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkExtprocTable runs the decision-overhead table (Extproc) with the
// memory index once and prints it to stdout (b.Log would truncate it): run
// it with -test.benchtime 1x from two binaries (before/after) alternately to
// compare on a loaded machine.
func BenchmarkExtprocTable(b *testing.B) {
	for b.Loop() {
		var out strings.Builder
		err := Extproc(context.Background(), &out, map[string]kvindex.Index{"memory": kvindex.NewMemory(kvindex.MemoryConfig{})},
			ExtprocOptions{Phase: 2 * time.Second, Command: "go test -run '^$' -bench ExtprocTable -benchtime 1x ./lab/benchmarks/"})
		if err != nil {
			b.Fatal(err)
		}
		fmt.Println(out.String())
	}
}
