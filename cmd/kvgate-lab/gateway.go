package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/envoy"
	"github.com/kvgate/kvgate/extproc/envoyaddr"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// kvgate-lab gateway is Envoy's part of the request path without an Envoy:
// an HTTP listener whose every request goes through the Envoy harness
// (lab/envoyharness.Proxy) playing one Envoy configuration, with the
// ext_proc replicas and the workers given here as EDS would give them. It
// is what the tests use as Envoy, made runnable for trying kvgate on a
// laptop; it is not a production proxy (no TLS, no HTTP/2 from clients, no
// access log, none of Envoy's resource controls).

func init() {
	register("gateway", cli.Command{
		Summary: "development gateway, NOT for production: HTTP in, ext_proc to kvgate extproc replicas, out to the chosen engine, as an Envoy config would (--config FILE, --extproc, --workers)",
		Run:     runGateway,
	})
}

// embeddedEnvoyFile is the Envoy configuration played by default.
const embeddedEnvoyFile = "envoy.yaml"

// servedByHeader is the response header in which the development gateway
// names the engine (ip:port) that answered: a development aid, which no
// shipped Envoy config adds; in production the decision log
// (/debug/decisions) says where each request went.
const servedByHeader = "x-kvgate-served-by"

// gatewayFlags are the command line as given.
type gatewayFlags struct {
	listen, envoyFile, cfgPath, extproc, workers, logFormat string
	servedBy                                                string
	allowDebug                                              bool
}

// gatewayPlan is what the gateway will run: the Envoy configuration it
// plays and the hosts of its two clusters.
type gatewayPlan struct {
	envoy   envoyharness.Config
	source  string // the Envoy file, for the start-up line
	listen  string
	extproc []string
	workers []string // nil: the Envoy config's own (ORIGINAL_DST has none)
	// envoyWarnings are validate-envoy's warnings for the Envoy file with
	// the kvgate config, logged at start.
	envoyWarnings []envoy.Problem
	// logFormat is the kvgate config's log.format ("" without --config).
	logFormat string
	exposed   bool // listen is beyond loopback
	debugSet  bool // --allow-client-debug
	// servedBy names the response header carrying the engine that
	// answered ("" = none).
	servedBy string
}

func runGateway(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f gatewayFlags
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "HTTP address clients send OpenAI requests to (host:port)")
	fs.StringVar(&f.envoyFile, "envoy-config", "", "Envoy configuration to play: a bootstrap, an Istio EnvoyFilter or Envoy Gateway policies (default: the shipped envoy/envoy.yaml, embedded)")
	fs.StringVar(&f.logFormat, "log-format", "", "log lines as json or text (default: the config's log.format, else json)")
	fs.StringVar(&f.cfgPath, "config", "", "kvgate configuration file: the ext_proc replica is its extproc.listen and the workers its engines[].endpoint, unless --extproc / --workers say otherwise")
	fs.StringVar(&f.extproc, "extproc", "", "comma-separated kvgate extproc replicas (host:port), the ext_proc cluster's endpoints (default: extproc.listen of --config, else the Envoy config's)")
	fs.StringVar(&f.workers, "workers", "", "comma-separated worker endpoints (ip:port), what EDS would deliver to the worker cluster (default: engines[].endpoint of --config)")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM: stop accepting connections, let requests in flight (streams included) finish for up to this, then cut them")
	fs.StringVar(&f.servedBy, "served-by-header", servedByHeader, "response header naming the engine (ip:port) that answered, a development aid no Envoy config adds (\"\" = none)")
	fs.BoolVar(&f.allowDebug, "allow-client-debug", false, "let clients' x-kvgate-* headers reach kvgate (every shipped Envoy config strips them): a deviation from the file, for reading x-kvgate-debug locally")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: kvgate-lab gateway [--config kvgate.yaml] [--extproc ADDR,...] [--workers ADDR,...] [flags]

A DEVELOPMENT GATEWAY, NOT FOR PRODUCTION: run a real Envoy (envoy/README.md) in front of a
fleet. It plays an Envoy configuration (default: envoy/envoy.yaml) exactly as kvgate's tests
play Envoy: client headers stripped before ext_proc, the ext_proc stream to a health-checked
kvgate extproc replica, the engine chosen from kvgate's answer with fallbacks walked on retry,
the served engine reported back, responses streamed through unbuffered (SSE included).
Unlike Envoy, each response names the engine that answered in x-kvgate-served-by
(--served-by-header). Plain HTTP/1.1 only, to clients, to ext_proc and to the engines.

Examples:
  kvgate-lab gateway --config examples/local/kvgate.yaml --listen 127.0.0.1:8080
  kvgate-lab gateway --extproc 127.0.0.1:9002,127.0.0.1:9012 --workers 127.0.0.1:8001,127.0.0.1:8002
  kvgate-lab gateway --envoy-config envoy/envoy-header-routing.yaml --extproc 127.0.0.1:9002

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate-lab gateway: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *drain <= 0 {
		fmt.Fprintf(stderr, "kvgate-lab gateway: --drain must be positive, got %v\n", *drain)
		return 2
	}
	plan, err := planGateway(f)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab gateway: %v\n", err)
		return 2
	}
	log, err := cli.NewProcessLogger(stderr, cli.LogFormat(f.logFormat, plan.logFormat))
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab gateway: --log-format: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serveGateway(ctx, stop, plan, *drain, log, stdout); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab gateway: %v\n", err)
		return 1
	}
	return 0
}

// planGateway checks the flags and the files they name; every error names
// the flag (or the file's key) at fault.
func planGateway(f gatewayFlags) (gatewayPlan, error) {
	var p gatewayPlan
	if _, port, err := net.SplitHostPort(f.listen); err != nil {
		return p, fmt.Errorf("--listen %q: %w", f.listen, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return p, fmt.Errorf("--listen %q: port %q is not a number in 0..65535", f.listen, port)
	}
	p.listen, p.exposed = f.listen, !confaddr.IsLoopback(f.listen)
	if f.servedBy != "" && !validHeaderName(f.servedBy) {
		return p, fmt.Errorf("--served-by-header %q: not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", f.servedBy)
	}
	p.servedBy = strings.ToLower(f.servedBy)

	var envoyData []byte
	var err error
	if f.envoyFile == "" {
		envoyData, err = envoy.Shipped(embeddedEnvoyFile)
		p.source = "envoy/" + embeddedEnvoyFile + " (embedded)"
	} else {
		envoyData, err = os.ReadFile(f.envoyFile)
		p.source = f.envoyFile
	}
	if err != nil {
		return p, fmt.Errorf("--envoy-config: %w", err)
	}
	if p.envoy, err = envoyharness.ParseConfig(envoyData); err != nil {
		return p, fmt.Errorf("--envoy-config %s: %w", p.source, err)
	}
	// The Proxy speaks plaintext: playing a file that says TLS would be
	// playing something else.
	if p.envoy.ExtProc.TLS {
		return p, fmt.Errorf("--envoy-config %s: cluster %s (ext_proc) has a transport_socket (TLS); kvgate-lab gateway dials ext_proc in plaintext only (use envoy/envoy.yaml, or a real Envoy)", p.source, p.envoy.ExtProc.Name)
	}
	if p.envoy.Route.Cluster.TLS {
		return p, fmt.Errorf("--envoy-config %s: cluster %s (workers) has a transport_socket (TLS); kvgate-lab gateway sends plaintext HTTP to the workers only", p.source, p.envoy.Route.Cluster.Name)
	}
	if f.allowDebug {
		p.envoy, p.debugSet = p.envoy.AllowingClientDebug(), true
	}

	var kv *config.Config
	if f.cfgPath != "" {
		c, err := config.Load(f.cfgPath)
		if err != nil {
			return p, fmt.Errorf("--config: %w", err)
		}
		kv = &c
		p.logFormat = c.Log.Format
		// What kvgate sends must be what this Envoy file can route (the
		// check `kvgate validate-envoy --config` runs).
		// Warnings (Envoy accepts it and kvgate routes, but cannot account
		// something) are logged at start, as validate-envoy without
		// --strict passes them.
		if _, err := envoy.ValidateWith(envoyData, &envoy.Kvgate{EnvoyRouting: c.Extproc.EnvoyRouting, Fallbacks: c.Extproc.Fallbacks}); err != nil {
			var verr *envoy.Error
			if !errors.As(err, &verr) || verr.Fatal() {
				return p, fmt.Errorf("--config %s does not fit --envoy-config %s: %w", f.cfgPath, p.source, err)
			}
			p.envoyWarnings = verr.Problems
		}
	}

	switch {
	case f.extproc != "":
		hosts, err := splitAddrs("--extproc", f.extproc, checkExtprocAddr)
		if err != nil {
			return p, err
		}
		p.extproc = hosts
	case kv != nil:
		if kv.Extproc.TLS.Enabled() {
			return p, fmt.Errorf("--config %s: extproc.tls is set; kvgate-lab gateway dials ext_proc in plaintext only (give --extproc for a plaintext replica, or use a real Envoy)", f.cfgPath)
		}
		p.extproc = []string{dialable(kv.Extproc.Listen)}
	default:
		p.extproc = p.envoy.ExtProc.Hosts
	}
	if len(p.extproc) == 0 {
		return p, fmt.Errorf("--extproc: required: the Envoy config's ext_proc cluster %s lists no endpoints", p.envoy.ExtProc.Name)
	}

	if p.envoy.Route.Cluster.OriginalDst != nil {
		// ORIGINAL_DST takes the host from kvgate's answer; the cluster has
		// no endpoints for EDS to fill.
		if f.workers != "" {
			return p, fmt.Errorf("--workers: cluster %s of %s is ORIGINAL_DST: it forwards to the address kvgate names and has no endpoint list", p.envoy.Route.Cluster.Name, p.source)
		}
		return p, nil
	}
	switch {
	case f.workers != "":
		hosts, err := splitAddrs("--workers", f.workers, envoyaddr.Canonical)
		if err != nil {
			return p, err
		}
		p.workers = hosts
	case kv != nil:
		for _, e := range kv.Engines {
			p.workers = append(p.workers, e.Endpoint) // canonical already (config.Validate)
		}
		if len(p.workers) == 0 {
			return p, fmt.Errorf("--workers: required: --config %s lists no engines (discovery finds them at run time)", f.cfgPath)
		}
	case f.envoyFile == "":
		// The embedded file's endpoints (10.0.0.11:8000, …) are examples.
		return p, fmt.Errorf("--workers or --config: required with the embedded envoy/%s (its worker endpoints are examples)", embeddedEnvoyFile)
	}
	if p.workers == nil && len(p.envoy.Route.Cluster.Hosts) == 0 {
		return p, fmt.Errorf("--workers: required: cluster %s of %s lists no endpoints (EDS fills it in a real Envoy)", p.envoy.Route.Cluster.Name, p.source)
	}
	return p, nil
}

// validHeaderName is RFC 9110's field-name: a token (section 5.1, 5.6.2).
func validHeaderName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// splitAddrs splits a comma-separated flag value and checks each address.
func splitAddrs(flagName, value string, check func(string) (string, error)) ([]string, error) {
	var out []string
	for i, a := range strings.Split(value, ",") {
		a = strings.TrimSpace(a)
		c, err := check(a)
		if err != nil {
			return nil, fmt.Errorf("%s: entry %d %q: %w", flagName, i, a, err)
		}
		if slices.Contains(out, c) {
			return nil, fmt.Errorf("%s: entry %d %q: listed twice", flagName, i, a)
		}
		out = append(out, c)
	}
	return out, nil
}

// checkExtprocAddr accepts host:port (a name is resolved by gRPC, as a
// STRICT_DNS cluster would).
func checkExtprocAddr(a string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", fmt.Errorf("want host:port: %w", err)
	}
	if host == "" {
		return "", errors.New("want host:port: the host is empty")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return a, nil
}

// dialable turns a listen address into one to connect to: a wildcard host
// ("0.0.0.0", "::", "") means this machine.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// gatewayMaxHeaderBytes is Envoy's default bound on request headers
// (http_connection_manager.proto max_request_headers_kb: 60 KiB); above it
// Envoy and net/http both answer 431.
const gatewayMaxHeaderBytes = 60 << 10

// serveGateway runs the gateway until ctx ends, then drains: the listener
// closes at once and the requests in flight get up to drain to finish.
// Envoy itself closes its listeners at shutdown without a drain unless
// told to drain first (admin drain_listeners?graceful; Envoy docs
// "Draining"); a development gateway stopped with Ctrl-C or by a process
// manager should not cut a stream it is serving.
func serveGateway(ctx context.Context, stopSignals func(), p gatewayPlan, drain time.Duration, log *slog.Logger, stdout io.Writer) error {
	proxy, err := envoyharness.NewProxy(p.envoy, envoyharness.ProxyOptions{ExtProc: p.extproc, Workers: p.workers, Logger: log, ServedByHeader: p.servedBy})
	if err != nil {
		return err
	}
	defer proxy.Close()
	ln, err := net.Listen("tcp", p.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: gatewayMaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	workers := p.workers
	if workers == nil {
		workers = proxy.Config().Route.Cluster.Hosts
	}
	log.Warn("development gateway, not for production", "listen", ln.Addr().String(), "envoy_config", p.source,
		"ext_proc", p.extproc, "workers", workers, "allow_client_debug", p.debugSet)
	fmt.Fprintf(stdout, "kvgate-lab gateway: DEVELOPMENT GATEWAY, NOT FOR PRODUCTION: http://%s plays %s; ext_proc %s; workers %s\n",
		ln.Addr(), p.source, strings.Join(p.extproc, ","), workersLabel(workers, proxy.Config()))
	for _, w := range p.envoyWarnings {
		log.Warn("the Envoy config routes, but kvgate cannot account everything through it", "envoy_config", p.source, "problem", w.String())
	}
	if p.exposed {
		log.Warn("listening beyond loopback: anyone who reaches this address can send requests to the fleet", "listen", p.listen)
	}
	if p.debugSet {
		log.Warn("--allow-client-debug: clients' x-kvgate-* headers reach kvgate, unlike with the Envoy file as written")
	}
	healthCtx, cancelHealth := context.WithCancel(ctx)
	defer cancelHealth()
	go func() {
		// Envoy holds a health-checked host out of rotation until its first
		// check passes; tell the user when that has happened.
		if err := proxy.WaitHealthy(healthCtx); err == nil {
			log.Info("ext_proc replicas healthy", "ext_proc", p.extproc)
		}
	}()

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// A second Ctrl-C stops at once (the default signal action).
	stopSignals()
	start := time.Now()
	log.Info("draining: listener closed, waiting for requests in flight", "drain", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain incomplete: cutting the requests still open", "after", time.Since(start).Round(time.Millisecond).String())
		srv.Close()
	} else {
		log.Info("drained", "took", time.Since(start).Round(time.Millisecond).String())
	}
	return nil
}

// workersLabel says where the requests go, for the start-up line.
func workersLabel(workers []string, c envoyharness.Config) string {
	if c.Route.Cluster.OriginalDst != nil {
		return "(ORIGINAL_DST: the address kvgate names)"
	}
	return strings.Join(workers, ",")
}
