// Package extprocd is the kvgate extproc process: its part of the daemon
// shell (Spec: its flags, what it requires of the file, its start) and
// its serving loop (Serve). It is a package, not part of cmd/kvgate's
// main, because the workshop (cmd/kvgate-lab's demo and gateway tests)
// runs the same extproc in-process rather than a copy of it.
package extprocd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// Spec is `kvgate extproc`.
var Spec = daemon.Spec{
	Name:       "extproc",
	Summary:    "Envoy ext_proc server: KV-aware endpoint picker (--config FILE)",
	ConfigHelp: "configuration file (YAML): models (with tokenizer directories), engines, extproc, index",
	Usage: "usage: kvgate extproc --config FILE [flags]\n\nServes Envoy's ext_proc protocol: parses each OpenAI request once, tokenizes it exactly as the\n" +
		"engine will, matches its KV blocks against the fleet index and sets x-gateway-destination-endpoint\n" +
		"and envoy.lb metadata (GIE endpoint-picker protocol). Flags:",
	Flags: flags,
}

func flags(fs *flag.FlagSet) daemon.Parts {
	listen := fs.String("listen", "", "override extproc.listen: gRPC address for Envoy's ext_proc filter")
	admin := fs.String("admin", "", "override extproc.admin: HTTP address for /metrics, /healthz, /readyz, /debug/decisions")
	withIndexer := fs.Bool("with-indexer", false, "also subscribe to the engines' KV events in this process (always on with the memory index)")
	// GIE's picker flags (v1.5.0 pkg/epp/server/options.go AddFlags), so a
	// gateway's endpointPickerRef Deployment moves to kvgate with its args.
	poolName := fs.String("pool-name", "", "set extproc.discovery.inference_pool.name: the InferencePool kvgate picks for (as GIE's --pool-name)")
	poolNamespace := fs.String("pool-namespace", "", "set extproc.discovery.inference_pool.namespace (empty: $NAMESPACE, else default, as GIE)")
	poolGroup := fs.String("pool-group", "", "set extproc.discovery.inference_pool.group; only "+kubeselect.InferencePoolGroup+" (InferencePool v1) is supported")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM, the whole drain: extproc.drain_grace with readiness failing and streams still served, then GOAWAY and the in-flight streams, up to this")
	return daemon.Parts{
		Override: func(cfg *config.Config) error {
			if *listen != "" {
				cfg.Extproc.Listen = *listen
			}
			if *admin != "" {
				cfg.Extproc.Admin = *admin
			}
			overridePool(&cfg.Extproc.Discovery, *poolName, *poolNamespace, *poolGroup)
			return nil
		},
		Check: check,
		Start: func(ctx context.Context, cfg config.Config, env daemon.Env) (*daemon.Process, error) {
			return start(ctx, cfg, Options{BaseDir: env.ConfigDir(), WithIndexer: *withIndexer, Drain: *drain, Log: env.Log,
				Listening: func(grpcAddr, adminAddr net.Addr) {
					env.Announce("ext_proc gRPC on %s, admin on http://%s", grpcAddr, adminAddr)
				}})
		},
	}
}

// overridePool lays GIE's --pool-* flags over the discovery section.
func overridePool(d *extprocconfig.Discovery, name, namespace, group string) {
	if name == "" && namespace == "" && group == "" {
		return
	}
	if d.InferencePool == nil {
		d.InferencePool = &kubeselect.InferencePool{}
	}
	p := d.InferencePool
	for _, f := range []struct {
		flag string
		dst  *string
	}{{name, &p.Name}, {namespace, &p.Namespace}, {group, &p.Group}} {
		if f.flag != "" {
			*f.dst = f.flag
		}
	}
}

// check is what the extproc requires of a valid file. The discovery
// section (--pool-* included) is checked before the tokenizers load: a
// typo is a configuration error, said at once.
func check(cfg config.Config, file string) error {
	if err := extproc.ValidateDiscovery(cfg.Extproc.Discovery); err != nil {
		return err
	}
	if err := checkTokenizerDirs(cfg.Models, filepath.Dir(file)); err != nil {
		return fmt.Errorf("config %s: %w", file, err)
	}
	return nil
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
// deadline), and only then does the process stop. `kvgate extproc` runs
// the same process through the daemon shell; the lab calls Serve.
func Serve(ctx context.Context, cfg config.Config, o Options) error {
	p, err := start(ctx, cfg, o)
	if err != nil {
		return err
	}
	return daemon.Serve(ctx, "extproc", p, o.Log)
}

// routing is the request path's parts, built before anything listens.
type routing struct {
	idx     kvindex.Index
	workers []kvfleet.Worker
	router  *extproc.Router
	srv     *server.Server
	promReg *prometheus.Registry
	ready   *readiness
}

// start builds the extproc (the request path, the in-process ingest,
// discovery, the gRPC listener) and returns it as a daemon process whose
// admin listener, drain and readiness are the extproc's.
func start(ctx context.Context, cfg config.Config, o Options) (*daemon.Process, error) {
	p := &daemon.Process{}
	r, err := buildRouting(ctx, cfg, o, p)
	if err != nil {
		return p.Abort(err)
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	svc, indexerDone, err := startIngest(runCtx, cfg, o, r)
	if err != nil {
		cancelRun()
		return p.Abort(err)
	}
	p.OnClose(func() { cancelRun(); <-indexerDone })
	if err := followDiscovery(runCtx, cfg, o, r, svc); err != nil {
		return p.Abort(err)
	}
	go r.router.Run(runCtx)
	gs, gln, err := listenGRPC(cfg, o, r.srv)
	if err != nil {
		return p.Abort(err)
	}
	p.OnClose(gs.Stop)
	p.Admin = daemon.Admin{
		Key: "extproc.admin", Addr: cfg.Extproc.Admin, Auth: cfg.Extproc.AdminAuth,
		Metrics: r.promReg,
		// /readyz answers what the gRPC readiness service says
		// (readiness.go): 503 before start, on SIGTERM while in-flight
		// streams finish, and while discovery reports a problem.
		Ready: func(context.Context) error {
			if why := r.ready.status(); why != "" {
				return errors.New(why)
			}
			return nil
		},
		Routes: decisionsRoutes(r.router),
	}
	p.Started = func(ctx context.Context, admin net.Addr) {
		if svc != nil {
			awaitSync(ctx, svc, cfg.Extproc.SyncTimeout.D(), o.Log)
		}
		r.ready.start()
		if o.Listening != nil {
			o.Listening(gln.Addr(), admin)
		}
		if o.RouterReady != nil {
			o.RouterReady(r.router)
		}
	}
	p.Run = func(ctx context.Context) error { <-ctx.Done(); return nil }
	p.Drain = func(context.Context) error {
		drainExtproc(r.srv, gs, r.ready, cfg.Extproc.DrainGrace.D(), o.Drain, o.Log)
		return nil
	}
	// drainExtproc keeps its own deadline (o.Drain, cutting the streams
	// still open); the shell's bound only backs it up.
	p.DrainBound = o.Drain
	return p, nil
}

// buildRouting opens the index and builds the Router, the ext_proc server
// and their metrics registry; p closes the index.
func buildRouting(ctx context.Context, cfg config.Config, o Options, p *daemon.Process) (*routing, error) {
	reg, err := preprocess.New(cfg.Models, preprocess.OptionsFor(cfg.Extproc.Preprocess, cfg.Extproc.MaxBodyBytes, o.BaseDir))
	if err != nil {
		return nil, err
	}
	idx, err := indexer.OpenIndex(ctx, cfg.Index)
	if err != nil {
		return nil, err
	}
	p.OnClose(func() { idx.Close() })
	workers, err := cfg.Workers()
	if err != nil {
		return nil, err
	}
	router, err := extproc.NewRouter(extproc.RouterConfig{Extproc: cfg.Extproc, Workers: workers}, reg, idx, o.Log)
	if err != nil {
		return nil, err
	}
	promReg := daemon.NewRegistry()
	if err := router.Register(promReg); err != nil {
		return nil, err
	}
	srv, err := server.New(router, extprocServerConfig(cfg.Extproc, func(d time.Duration) { router.ObserveDecision(d.Seconds()) }, o.Log))
	if err != nil {
		return nil, err
	}
	promReg.MustRegister(srv.Collector())
	return &routing{idx: idx, workers: workers, router: router, srv: srv, promReg: promReg, ready: &readiness{srv: srv}}, nil
}

// startIngest runs the indexer service in this process when the index
// lives here (one not shared by the replicas: kvindex.Shared) or
// --with-indexer asks; done closes when it has
// stopped (at once without one).
func startIngest(runCtx context.Context, cfg config.Config, o Options, r *routing) (svc *indexer.Service, done chan struct{}, err error) {
	done = make(chan struct{})
	if _, shared := r.idx.(kvindex.Shared); shared && !o.WithIndexer {
		close(done)
		return nil, done, nil
	}
	// An index that is not shared lives in this process, so this process
	// must also keep it fed.
	svc, err = indexer.New(indexer.ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: r.workers}, r.idx, o.Log)
	if err != nil {
		close(done)
		return nil, done, err
	}
	r.promReg.MustRegister(svc.Collector())
	go func() { svc.Run(runCtx); close(done) }()
	return svc, done, nil
}

// followDiscovery starts the configured discovery source, if any: the
// Router and the in-process ingest (svc, may be nil) follow its worker
// sets, and readiness waits for its first.
func followDiscovery(runCtx context.Context, cfg config.Config, o Options, r *routing, svc *indexer.Service) error {
	src, err := extproc.DiscoverySource(cfg.Extproc.Discovery, r.router, r.ready.setDiscovery, o.Log)
	if err != nil {
		return err
	}
	if pool, ok := src.(*discovery.InferencePoolSource); ok {
		if err := pool.Register(r.promReg); err != nil {
			return err
		}
	}
	if src == nil {
		return nil
	}
	r.ready.awaitingDiscovery = true
	var first sync.Once
	follow := func(ctx context.Context, ws []kvfleet.Worker) error {
		first.Do(r.ready.discovered)
		if svc == nil {
			return nil
		}
		return svc.SetWorkers(ctx, ws)
	}
	go func() {
		if err := extproc.FollowDiscovery(runCtx, src, r.router, follow, o.Log); err != nil {
			o.Log.Error("discovery stopped", "err", err)
		}
	}()
	return nil
}

// listenGRPC serves the ext_proc gRPC server. TLS material is loaded
// before listening: a bad file fails the start, and every later handshake
// re-reads rotated files.
func listenGRPC(cfg config.Config, o Options, srv *server.Server) (*grpc.Server, net.Listener, error) {
	tlsCfg, err := cfg.Extproc.TLS.Load()
	if err != nil {
		return nil, nil, fmt.Errorf("extproc.%w", err)
	}
	grpcOpts := extprocGRPCOptions(cfg.Extproc)
	if tlsCfg != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		o.Log.Info("ext_proc listener serves TLS", "cert_file", cfg.Extproc.TLS.CertFile,
			"client_ca_file", cfg.Extproc.TLS.ClientCAFile, "require_client_cert", cfg.Extproc.TLS.RequireClientCert)
	}
	gln, err := net.Listen("tcp", cfg.Extproc.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", cfg.Extproc.Listen, err)
	}
	gs := grpc.NewServer(grpcOpts...)
	srv.Register(gs)
	go gs.Serve(gln)
	if o.GRPCServer != nil {
		o.GRPCServer(gs)
	}
	return gs, gln, nil
}

// decisionsRoutes is the extproc's admin route besides the probes and
// metrics: the recent decisions.
func decisionsRoutes(router *extproc.Router) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /debug/decisions", router.DecisionsHandler())
	return mux
}

// awaitSync holds readiness until the in-process index was rebuilt from
// the engines' replays, up to extproc.sync_timeout.
func awaitSync(ctx context.Context, svc *indexer.Service, timeout time.Duration, log *slog.Logger) {
	syncStart := time.Now()
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := svc.WaitSynced(sctx); err != nil {
		log.Warn("reporting ready before every engine's events were replayed", "err", err, "waited", time.Since(syncStart).Round(time.Millisecond))
	} else {
		log.Info("index rebuilt from the engines' event streams", "took", time.Since(syncStart).Round(time.Millisecond))
	}
}
