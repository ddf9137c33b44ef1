// Package extprocd is the kvgate extproc process: its command line (Run)
// and its serving loop (Serve). It is a package, not part of cmd/kvgate's
// main, because the workshop (cmd/kvgate-lab's demo and gateway tests)
// runs the same extproc in-process rather than a copy of it.
package extprocd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// Command is `kvgate extproc`.
var Command = cli.Command{
	Summary: "Envoy ext_proc server: KV-aware endpoint picker (--config FILE)",
	Run:     Run,
}

// Run is `kvgate extproc`'s command line.
func Run(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate extproc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML): models (with tokenizer directories), engines, extproc, index")
	listen := fs.String("listen", "", "override extproc.listen: gRPC address for Envoy's ext_proc filter")
	admin := fs.String("admin", "", "override extproc.admin: HTTP address for /metrics, /healthz, /readyz, /debug/decisions")
	withIndexer := fs.Bool("with-indexer", false, "also subscribe to the engines' KV events in this process (always on with the memory index)")
	logFmt := cli.LogFormatFlag(fs)
	// GIE's picker flags (v1.5.0 pkg/epp/server/options.go AddFlags), so a
	// gateway's endpointPickerRef Deployment moves to kvgate with its args.
	poolName := fs.String("pool-name", "", "set extproc.discovery.inference_pool.name: the InferencePool kvgate picks for (as GIE's --pool-name)")
	poolNamespace := fs.String("pool-namespace", "", "set extproc.discovery.inference_pool.namespace (empty: $NAMESPACE, else default, as GIE)")
	poolGroup := fs.String("pool-group", "", "set extproc.discovery.inference_pool.group; only "+kubeselect.InferencePoolGroup+" (InferencePool v1) is supported")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM, the whole drain: extproc.drain_grace with readiness failing and streams still served, then GOAWAY and the in-flight streams, up to this")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kvgate extproc --config FILE [flags]\n\nServes Envoy's ext_proc protocol: parses each OpenAI request once, tokenizes it exactly as the\nengine will, matches its KV blocks against the fleet index and sets x-gateway-destination-endpoint\nand envoy.lb metadata (GIE endpoint-picker protocol). Flags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, "kvgate extproc: --config is required (models need tokenizer directories)")
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate extproc: %v\n", err)
		return 2
	}
	if *listen != "" {
		cfg.Extproc.Listen = *listen
	}
	if *admin != "" {
		cfg.Extproc.Admin = *admin
	}
	if *poolName != "" || *poolNamespace != "" || *poolGroup != "" {
		if cfg.Extproc.Discovery.InferencePool == nil {
			cfg.Extproc.Discovery.InferencePool = &kubeselect.InferencePool{}
		}
		p := cfg.Extproc.Discovery.InferencePool
		for _, f := range []struct {
			flag string
			dst  *string
		}{{*poolName, &p.Name}, {*poolNamespace, &p.Namespace}, {*poolGroup, &p.Group}} {
			if f.flag != "" {
				*f.dst = f.flag
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "kvgate extproc: %v\n", err)
		return 2
	}
	// The discovery section (--pool-* included) is checked before the
	// tokenizers load: a typo is a configuration error, said at once.
	if err := extproc.ValidateDiscovery(cfg.Extproc.Discovery); err != nil {
		fmt.Fprintf(stderr, "kvgate extproc: %v\n", err)
		return 2
	}
	if err := checkTokenizerDirs(cfg.Models, filepath.Dir(*cfgPath)); err != nil {
		fmt.Fprintf(stderr, "kvgate extproc: config %s: %v\n", *cfgPath, err)
		return 2
	}
	log, err := cli.NewProcessLogger(stderr, cli.LogFormat(*logFmt, cfg.Log.Format))
	if err != nil {
		fmt.Fprintf(stderr, "kvgate extproc: --log-format: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = Serve(ctx, cfg, Options{BaseDir: filepath.Dir(*cfgPath), WithIndexer: *withIndexer, Drain: *drain, Log: log,
		Listening: func(grpcAddr, adminAddr net.Addr) {
			fmt.Fprintf(stdout, "kvgate extproc: ext_proc gRPC on %s, admin on http://%s\n", grpcAddr, adminAddr)
		}})
	if err != nil {
		fmt.Fprintf(stderr, "kvgate extproc: %v\n", err)
		return 1
	}
	return 0
}

// Options are Serve's inputs besides the configuration.
type Options struct {
	// BaseDir resolves relative tokenizer directories (the config file's folder).
	BaseDir string
	// WithIndexer also ingests the engines' KV events in this process.
	WithIndexer bool
	// Drain bounds the whole drain on ctx's end.
	Drain time.Duration
	Log   *slog.Logger
	// Listening, if set, receives the listeners' addresses once ready.
	Listening func(grpcAddr, adminAddr net.Addr)
	// RouterReady, if set, receives the router once serving (tests).
	RouterReady func(*extproc.Router)
	// GRPCServer, if set, receives the gRPC server once listening (tests).
	GRPCServer func(*grpc.Server)
}

// grpcHeadroom is what an ext_proc message holds besides the body: the
// request headers, metadata_context and protobuf framing.
const grpcHeadroom = 1 << 20

// extprocGRPCOptions bounds the ext_proc gRPC server.
func extprocGRPCOptions(x extprocconfig.Config) []grpc.ServerOption {
	return []grpc.ServerOption{
		// Envoy sends a BUFFERED body as one message (ext_proc.cc
		// handleDataBufferedMode); with grpc-go's 4 MiB default a body
		// kvgate accepts (max_body_bytes) would fail with RESOURCE_EXHAUSTED.
		grpc.MaxRecvMsgSize(x.MaxBodyBytes + grpcHeadroom),
		grpc.MaxConcurrentStreams(x.GRPC.MaxConcurrentStreams),
		// Envoy's HTTP/2 connection_keepalive pings are allowed down to
		// keepalive_min_time, also on a connection without streams;
		// grpc-go's 5-minute default would cut such an Envoy off.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: x.GRPC.KeepaliveMinTime.D(), PermitWithoutStream: true}),
		// Dead peers are found and their streams released.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: x.GRPC.KeepaliveTime.D(), Timeout: x.GRPC.KeepaliveTimeout.D()}),
		// Fixed flow-control windows: grpc-go's BDP estimator would grow
		// them to 16 MiB per stream, letting one connection park that much
		// per stream ahead of what kvgate reads and budgets.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(4 << 20),
	}
}

// extprocServerConfig maps the extproc configuration onto the ext_proc
// server's bounds.
func extprocServerConfig(x extprocconfig.Config, onDecision func(time.Duration), log *slog.Logger) server.Config {
	return server.Config{
		MaxBodyBytes:       x.MaxBodyBytes,
		SingleDestination:  x.EnvoyRouting == extprocconfig.RoutingOriginalDst,
		BufferBudgetBytes:  x.Streams.BufferBudgetBytes,
		MaxOpenStreams:     x.Streams.MaxOpen,
		RequestIdleTimeout: x.Streams.RequestIdleTimeout.D(),
		RequestTimeout:     x.Streams.RequestTimeout.D(),
		MaxStreamDuration:  x.Streams.MaxDuration.D(),

		MaxOpenPerSourcePercent: x.Streams.MaxOpenPerSourcePercent,
		SourceHeader:            x.Streams.SourceHeader,
		MinBodyBytesPerSecond:   x.Streams.MinBodyBytesPerSecond,
		BodyRateGrace:           x.Streams.BodyGrace.D(),
		OnDecision:              onDecision,
		Logger:                  log,
	}
}

// drainExtproc takes a replica out of Envoy's rotation without failing a
// request: readiness fails at once (the gRPC health service Envoy's
// active health check reads, and /readyz) while new streams are still
// served for grace, so that the health checks move Envoy to the other
// replicas; then GracefulStop sends GOAWAY (Envoy opens no new stream on
// the connection after it) and waits for the streams in flight, up to
// the drain deadline, after which the rest are cut.
func drainExtproc(srv *server.Server, gs *grpc.Server, ready *readiness, grace, deadline time.Duration, log *slog.Logger) {
	start := time.Now()
	ready.drain()
	srv.StartDrain()
	log.Info("draining: readiness failed, still serving", "grace", grace, "deadline", deadline)
	time.Sleep(min(grace, deadline))
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	log.Info("draining: GOAWAY sent, waiting for streams in flight", "open", srv.Stats().StreamsActive)
	// Past the deadline already (grace >= deadline), GracefulStop still
	// gets a moment: with no stream left it returns at once.
	select {
	case <-stopped:
		log.Info("drained", "took", time.Since(start).Round(time.Millisecond))
	case <-time.After(max(deadline-time.Since(start), 100*time.Millisecond)):
		log.Warn("drain incomplete: cutting the streams still open", "open", srv.Stats().StreamsActive)
		gs.Stop()
		<-stopped
	}
}

// Serve runs the ext_proc server until ctx ends, then drains: the
// readiness probe fails first, in-flight streams finish (up to the drain
// deadline), and only then does the process stop.
func Serve(ctx context.Context, cfg config.Config, o Options) error {
	reg, err := preprocess.New(cfg.Models, preprocess.OptionsFor(cfg.Extproc.Preprocess, cfg.Extproc.MaxBodyBytes, o.BaseDir))
	if err != nil {
		return err
	}
	idx, err := indexer.OpenIndex(ctx, cfg.Index)
	if err != nil {
		return err
	}
	defer idx.Close()
	workers, err := cfg.Workers()
	if err != nil {
		return err
	}
	router, err := extproc.NewRouter(extproc.RouterConfig{Extproc: cfg.Extproc, Index: cfg.Index, Workers: workers}, reg, idx, o.Log)
	if err != nil {
		return err
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := router.Register(promReg); err != nil {
		return err
	}
	srv, err := server.New(router, extprocServerConfig(cfg.Extproc, func(d time.Duration) { router.ObserveDecision(d.Seconds()) }, o.Log))
	if err != nil {
		return err
	}
	promReg.MustRegister(srv.Collector())
	ready := &readiness{srv: srv}
	src, err := extproc.DiscoverySource(cfg.Extproc.Discovery, router, ready.setDiscovery, o.Log)
	if err != nil {
		return err
	}
	if pool, ok := src.(*discovery.InferencePoolSource); ok {
		if err := pool.Register(promReg); err != nil {
			return err
		}
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	indexerDone := make(chan struct{})
	var setWorkers func(context.Context, []kvfleet.Worker) error
	var svc *indexer.Service
	if _, shared := idx.(kvindex.Shared); !shared || o.WithIndexer {
		// An index that is not shared lives in this process, so this
		// process must also keep it fed.
		svc, err = indexer.New(indexer.ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: workers}, idx, o.Log)
		if err != nil {
			return err
		}
		promReg.MustRegister(svc.Collector())
		setWorkers = svc.SetWorkers
		go func() { svc.Run(runCtx); close(indexerDone) }()
	} else {
		close(indexerDone)
	}
	if src != nil {
		ready.awaitingDiscovery = true
		var first sync.Once
		follow := func(ctx context.Context, ws []kvfleet.Worker) error {
			first.Do(ready.discovered)
			if setWorkers == nil {
				return nil
			}
			return setWorkers(ctx, ws)
		}
		go func() {
			if err := extproc.FollowDiscovery(runCtx, src, router, follow, o.Log); err != nil {
				o.Log.Error("discovery stopped", "err", err)
			}
		}()
	}

	go router.Run(runCtx)

	// TLS material is loaded before listening: a bad file fails the start,
	// and every later handshake re-reads rotated files.
	tlsCfg, err := cfg.Extproc.TLS.Load()
	if err != nil {
		return fmt.Errorf("extproc.%w", err)
	}
	grpcOpts := extprocGRPCOptions(cfg.Extproc)
	if tlsCfg != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		o.Log.Info("ext_proc listener serves TLS", "cert_file", cfg.Extproc.TLS.CertFile,
			"client_ca_file", cfg.Extproc.TLS.ClientCAFile, "require_client_cert", cfg.Extproc.TLS.RequireClientCert)
	}
	gln, err := net.Listen("tcp", cfg.Extproc.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Extproc.Listen, err)
	}
	gs := grpc.NewServer(grpcOpts...)
	srv.Register(gs)
	go gs.Serve(gln)
	defer gs.Stop()
	if o.GRPCServer != nil {
		o.GRPCServer(gs)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	mux.Handle("GET /debug/decisions", router.DecisionsHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	// /readyz answers what the gRPC readiness service says (readiness.go):
	// 503 before start, on SIGTERM while in-flight streams finish, and
	// while discovery reports a problem, with the reason.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := ready.status(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	aln, err := net.Listen("tcp", cfg.Extproc.Admin)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Extproc.Admin, err)
	}
	hs := adminhttp.NewServer(adminhttp.WithAdminAuth(mux, "extproc.admin", cfg.Extproc.Admin, cfg.Extproc.AdminAuth, o.Log))
	go hs.Serve(aln)
	defer hs.Close()

	if svc != nil {
		syncStart := time.Now()
		sctx, cancel := context.WithTimeout(ctx, cfg.Extproc.SyncTimeout.D())
		if err := svc.WaitSynced(sctx); err != nil {
			o.Log.Warn("reporting ready before every engine's events were replayed", "err", err, "waited", time.Since(syncStart).Round(time.Millisecond))
		} else {
			o.Log.Info("index rebuilt from the engines' event streams", "took", time.Since(syncStart).Round(time.Millisecond))
		}
		cancel()
	}
	ready.start()
	if o.Listening != nil {
		o.Listening(gln.Addr(), aln.Addr())
	}
	if o.RouterReady != nil {
		o.RouterReady(router)
	}
	<-ctx.Done()
	drainExtproc(srv, gs, ready, cfg.Extproc.DrainGrace.D(), o.Drain, o.Log)
	cancelRun()
	<-indexerDone
	o.Log.Info("extproc stopped")
	return nil
}
