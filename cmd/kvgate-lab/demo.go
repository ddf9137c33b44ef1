package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

func init() {
	register("index-demo", cli.Command{
		Summary: "event-path demo: simulated engines → ZMQ KV events → indexer; index vs round-robin, gap repair",
		Run:     runDemo,
	})
}

const demoBlockSize = 16

// demoFleet is a set of demo engines routed by one policy.
type demoFleet struct {
	policy  string
	engines []*demoEngine
	ids     []kvfleet.WorkerID
	rr      int
}

func runDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab index-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	perFleet := fs.Int("engines", 4, "engines per fleet (1..32)")
	convs := fs.Int("conversations", 24, "conversations (1..1000)")
	turns := fs.Int("turns", 6, "turns per conversation (1..50)")
	rate := fs.Float64("rate", 100, "requests per second sent to each fleet")
	listen := fs.String("listen", "127.0.0.1:9400", "HTTP address for the indexer's /metrics /status (when taken, the demo says so and takes a free port)")
	hold := fs.Duration("hold", 0, "keep the indexer serving this long after the run (0 = exit)")
	seed := fs.Uint64("seed", 1, "workload seed")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if *perFleet < 1 || *perFleet > 32 || *convs < 1 || *convs > 1000 || *turns < 1 || *turns > 50 || *rate <= 0 {
		fmt.Fprintln(stderr, "kvgate-lab index-demo: --engines 1..32, --conversations 1..1000, --turns 1..50, --rate > 0")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx, stdout, demoOptions{*perFleet, *convs, *turns, *rate, *listen, *hold, *seed}); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab index-demo: %v\n", err)
		return 1
	}
	return 0
}

type demoOptions struct {
	perFleet, convs, turns int
	rate                   float64
	listen                 string
	hold                   time.Duration
	seed                   uint64
}

func demo(ctx context.Context, out io.Writer, o demoOptions) error {
	fleets := []*demoFleet{{policy: "round-robin"}, {policy: "kv-aware (index)"}}
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "demo", BlockSize: demoBlockSize}}
	// Each engine holds about a fifth of the workload's distinct blocks, so
	// where a conversation lands decides whether its history is still cached.
	capacity := o.convs * (6 + o.turns*5) / 5
	for fi, f := range fleets {
		for i := 0; i < o.perFleet; i++ {
			enc := kvevents.EncodingArray
			if i%2 == 1 {
				enc = kvevents.EncodingMap // both of vLLM's encodings on the wire
			}
			e, err := newDemoEngine(fmt.Sprintf("%c%d", 'A'+fi, i), demoBlockSize, capacity, enc)
			if err != nil {
				return err
			}
			defer e.pub.Close()
			endpoint := net.JoinHostPort("127.0.0.1", strconv.Itoa(18000+100*fi+i))
			f.engines = append(f.engines, e)
			f.ids = append(f.ids, kvfleet.WorkerID{Endpoint: endpoint})
			cfg.Engines = append(cfg.Engines, config.Engine{
				Endpoint: endpoint, Model: "demo", DPRanks: 1,
				Events: "tcp://" + e.pub.Addr().String(), Replay: "tcp://" + e.pub.ReplayAddr().String(),
			})
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	idx, err := indexer.OpenIndex(ctx, cfg.Index)
	if err != nil {
		return err
	}
	defer idx.Close()
	workers, err := cfg.Workers()
	if err != nil {
		return err
	}
	svc, err := indexer.New(indexer.ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: workers}, idx, log)
	if err != nil {
		return err
	}
	ln, err := listenOrFallback(out, o.listen, "indexer HTTP")
	if err != nil {
		return err
	}
	srv := adminhttp.NewServer(svc.Handler())
	go srv.Serve(ln)
	defer srv.Close()
	runCtx, cancelRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { svc.Run(runCtx); close(done) }()
	defer func() { cancelRun(); <-done }()

	fmt.Fprintf(out, "kvgate-lab index-demo: %d simulated vLLM engines per fleet publish KV events over ZMQ (array and map encodings);\n", o.perFleet)
	fmt.Fprintf(out, "the indexer ingests them into the in-memory fleet kvindex. Metrics: http://%s/metrics  status: http://%s/status\n\n", ln.Addr(), ln.Addr())

	work := newDemoWorkload(o.seed, o.convs, o.turns)
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
	defer tick.Stop()
	gapAt := len(work.requests) / 2
	for i, req := range work.requests {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if i == gapAt {
			// Drop one live batch on the way to the indexer: it must see
			// the sequence gap and repair it from the engine's replay buffer.
			fleets[1].engines[1].skipNext = true
			fmt.Fprintf(out, "[%3d/%d] dropping one live event batch from engine B1: the indexer must repair the gap via replay\n", i, len(work.requests))
		}
		for _, f := range fleets {
			target := f.pick(ctx, idx, req)
			if _, _, err := f.engines[target].serve(req); err != nil {
				return err
			}
		}
		if (i+1)%(len(work.requests)/4+1) == 0 {
			fmt.Fprintf(out, "[%3d/%d] %s\n", i+1, len(work.requests), hitLine(fleets))
		}
	}
	if err := waitIngested(ctx, svc, fleets); err != nil {
		return err
	}
	return demoReport(ctx, out, svc, idx, fleets, work, o.hold)
}

// pick chooses an engine. The kv-aware policy here is deliberately
// simple (longest cached prefix, least-used on ties, bounded imbalance);
// the real scoring lives in picker/.
func (f *demoFleet) pick(ctx context.Context, idx kvindex.Index, tokens []uint32) int {
	if f.policy == "round-robin" {
		f.rr++
		return f.rr % len(f.engines)
	}
	local := blockhash.LocalHashes(tokens, demoBlockSize, blockhash.BaseSeed)
	m, err := kvindex.MatchMap(ctx, idx, blockhash.SequenceHashes(local))
	least := 0
	for i, e := range f.engines {
		if e.requests < f.engines[least].requests {
			least = i
		}
	}
	if err != nil {
		return least
	}
	best, bestDepth := least, 0
	for i, id := range f.ids {
		d := m[id][kvfleet.TierDevice]
		if d > bestDepth || (d == bestDepth && f.engines[i].requests < f.engines[best].requests) {
			best, bestDepth = i, d
		}
	}
	if f.engines[best].requests > f.engines[least].requests+8 {
		return least
	}
	return best
}

func hitLine(fleets []*demoFleet) string {
	s := "prefix-cache hit rate:"
	for _, f := range fleets {
		hit, all := 0, 0
		for _, e := range f.engines {
			hit, all = hit+e.hitBlocks, all+e.allBlocks
		}
		s += fmt.Sprintf("  %s %5.1f%%", f.policy, 100*float64(hit)/float64(max(all, 1)))
	}
	return s
}

// waitIngested waits until the indexer has applied every batch the engines
// published (including the one dropped live and replayed).
func waitIngested(ctx context.Context, svc *indexer.Service, fleets []*demoFleet) error {
	want := 0
	for _, f := range fleets {
		for _, e := range f.engines {
			want += int(e.published)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := svc.Status(ctx)
		got := 0
		for _, w := range st.Workers {
			got += int(w.Ingest.Batches)
		}
		if err == nil && got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("indexer applied %d of %d published batches after 10s", got, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func demoReport(ctx context.Context, out io.Writer, svc *indexer.Service, idx kvindex.Index, fleets []*demoFleet, work *demoWorkload, hold time.Duration) error {
	st, err := svc.Status(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nper engine (from the indexer's /status):")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "worker\tbatches\treplayed\tgaps\trepaired\tresets\tblocks in index")
	for _, w := range st.Workers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", w.Worker, w.Ingest.Batches, w.Stream.BatchesReplayed,
			w.Stream.GapsDetected, w.Stream.GapsRepaired, w.Stream.Resets, w.Ingest.SequenceEntries)
	}
	tw.Flush()
	fmt.Fprintf(out, "index: %d blocks, %d entries, %d workers\n", st.Index.Blocks, st.Index.Entries, st.Index.Workers)

	// The index must agree with every engine's own cache on every prefix.
	agree, total := 0, 0
	for _, tokens := range work.finalHistories {
		local := blockhash.LocalHashes(tokens, demoBlockSize, blockhash.BaseSeed)
		m, err := kvindex.MatchMap(ctx, idx, blockhash.SequenceHashes(local))
		if err != nil {
			return err
		}
		for _, f := range fleets {
			for i, e := range f.engines {
				total++
				if m[f.ids[i]][kvfleet.TierDevice] == e.cachedDepth(tokens) {
					agree++
				}
			}
		}
	}
	fmt.Fprintf(out, "\nindex agrees with the engines' own caches on %d/%d (conversation, engine) prefixes\n", agree, total)
	fmt.Fprintln(out, hitLine(fleets))
	if agree != total {
		return fmt.Errorf("index disagrees with engines on %d prefixes", total-agree)
	}
	if hold > 0 {
		fmt.Fprintf(out, "\nholding for %s; Ctrl-C to stop\n", hold)
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
	}
	return nil
}

// demoWorkload is multi-turn chat: a few shared system prompts, each
// conversation resending its whole history every turn.
type demoWorkload struct {
	requests       [][]uint32
	finalHistories [][]uint32
}

func newDemoWorkload(seed uint64, convs, turns int) *demoWorkload {
	r := rand.New(rand.NewPCG(seed, 7))
	text := func(blocks int) []uint32 {
		t := make([]uint32, blocks*demoBlockSize)
		for i := range t {
			t[i] = uint32(r.IntN(150000))
		}
		return t
	}
	systems := [][]uint32{text(6), text(6), text(6)}
	hist := make([][]uint32, convs)
	for c := range hist {
		hist[c] = append([]uint32(nil), systems[c%len(systems)]...)
	}
	w := &demoWorkload{}
	for t := 0; t < turns; t++ {
		for _, c := range r.Perm(convs) {
			hist[c] = append(hist[c], text(1+r.IntN(3))...)
			w.requests = append(w.requests, append([]uint32(nil), hist[c]...))
			hist[c] = append(hist[c], text(1+r.IntN(2))...) // the reply joins the history
		}
	}
	w.finalHistories = hist
	return w
}
