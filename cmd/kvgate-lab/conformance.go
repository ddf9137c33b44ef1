package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/lab/conformance"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

func init() {
	register("conformance", cli.Command{
		Summary: "endpoint-picker conformance suite (GIE protocol over Envoy ext_proc) against any picker: --epp HOST:PORT",
		Run:     runConformance,
	})
}

// The adapters: how a picker learns the suite's fake endpoints.
const (
	// adapterSubsetHint: the picker is told nothing; every request's
	// subset hint lists the endpoints (pickers that honour the hint alone).
	adapterSubsetHint = "subset-hint"
	// adapterKvgateConfig: kvgate reads a configuration file naming the
	// endpoints (--write-kvgate-config writes it).
	adapterKvgateConfig = "kvgate-config"
)

// defaultEndpoints are fixed so that a configuration written before the
// run names the addresses the run listens on: four endpoints serve the
// first model, two the second (the extended profile's model routing).
const defaultEndpoints = "127.0.0.1:18101,127.0.0.1:18102,127.0.0.1:18103,127.0.0.1:18104,127.0.0.1:18105,127.0.0.1:18106"

// kvgateShedAfter is the admission bound (extproc.admission.max_inflight)
// the kvgate adapter writes, so the 429 case has a bound to cross.
const kvgateShedAfter = 4

type conformanceFlags struct {
	epp, profile, adapter, endpoints, models, jsonPath, only string
	tlsCA, tlsCert, tlsKey, tlsServerName                    string
	writeConfig, tokenizer, listen                           string
	shedAfter, maxBody                                       int
	caseTimeout, wait                                        time.Duration
	poolKnown                                                bool
}

func conformanceFlagSet(stderr io.Writer) (*flag.FlagSet, *conformanceFlags) {
	f := &conformanceFlags{}
	fs := flag.NewFlagSet("kvgate-lab conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.epp, "epp", "", "the picker's ext_proc gRPC address, HOST:PORT")
	fs.StringVar(&f.profile, "profile", "core", "core (the endpoint-picker protocol) or extended (adds body-based model routing, P/D header, objective header)")
	fs.StringVar(&f.adapter, "adapter", adapterSubsetHint, "how the picker learns the endpoints: subset-hint (from each request's hint) or kvgate-config (from a config file, --write-kvgate-config)")
	fs.StringVar(&f.endpoints, "endpoints", defaultEndpoints, "the fake model servers' listen addresses, comma-separated (at least 4; port 0: any free port, subset-hint adapter only)")
	fs.StringVar(&f.models, "models", "conformance-a,conformance-b", "the two model names; the first is served by all but the last two endpoints, the second by the last two")
	fs.StringVar(&f.jsonPath, "json", "", "also write the report as JSON to this file")
	fs.StringVar(&f.only, "only", "", "run only these case ids, comma-separated")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "dial the picker with TLS, verifying it against this CA file (PEM)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "client certificate (PEM) for mutual TLS; needs --tls-key")
	fs.StringVar(&f.tlsKey, "tls-key", "", "client key (PEM) for mutual TLS")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "the name to verify in the picker's certificate (default: the --epp host)")
	fs.BoolVar(&f.poolKnown, "pool-known", false, "subset-hint adapter: the picker was also configured with the --endpoints addresses (the first model on all but the last two), so the cases that need a known pool run")
	fs.IntVar(&f.shedAfter, "shed-after", 0, "requests in flight at which the picker was configured to shed (429); 0: unknown, the 429 case is skipped (kvgate-config: 4)")
	fs.IntVar(&f.maxBody, "max-body-bytes", conformance.DefaultMaxBodyBytes, "the largest request body the picker documents accepting; the large-body case sends this much")
	fs.DurationVar(&f.wait, "wait", time.Minute, "wait up to this long for the picker's readiness health check to answer SERVING before the first case")
	fs.DurationVar(&f.caseTimeout, "case-timeout", 20*time.Second, "bound on each case")
	fs.StringVar(&f.writeConfig, "write-kvgate-config", "", "kvgate-config adapter: write kvgate's configuration for the endpoints to this file and exit")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "kvgate-config adapter: the models' tokenizer directory (default: the fetched qwen3 files)")
	fs.StringVar(&f.listen, "kvgate-listen", "127.0.0.1:9002", "kvgate-config adapter: the extproc.listen the written configuration sets")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kvgate-lab conformance --epp HOST:PORT [flags]\n\n"+
			"Plays Envoy's side of ext_proc and fake model servers against an endpoint picker and checks the\n"+
			"Gateway API Inference Extension endpoint-picker protocol, one line per case. docs/conformance.md\n"+
			"says how to run it against another picker. Exit 0: no case failed; 1: a case failed. Flags:")
		fs.PrintDefaults()
	}
	return fs, f
}

func runConformance(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs, f := conformanceFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvgate-lab conformance: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	addrs, models, err := f.fleet()
	if err != nil {
		return usage("%v", err)
	}
	if f.writeConfig != "" {
		return f.writeKvgateConfig(addrs, models, stdout, stderr)
	}
	o, err := f.options()
	if err != nil {
		return usage("%v", err)
	}
	eps, err := conformance.StartEndpoints(addrs, models)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab conformance: %v\n", err)
		return 1
	}
	defer eps.Close()
	o.Endpoints = eps
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := conformance.Run(ctx, o)
	if err != nil && rep == nil {
		fmt.Fprintf(stderr, "kvgate-lab conformance: %v\n", err)
		return 1
	}
	rep.Adapter = f.adapter
	if werr := rep.WriteText(stdout); werr != nil {
		return 1
	}
	if f.jsonPath != "" {
		if code := writeReportJSON(rep, f.jsonPath, stdout, stderr); code != 0 {
			return code
		}
	}
	if _, failed, _ := rep.Counts(); failed > 0 || err != nil {
		return 1
	}
	return 0
}

// fleet reads --endpoints and --models into one model per endpoint.
func (f *conformanceFlags) fleet() ([]string, []string, error) {
	addrs := splitList(f.endpoints)
	names := splitList(f.models)
	if len(addrs) < 4 {
		return nil, nil, fmt.Errorf("--endpoints: %d addresses, want at least 4", len(addrs))
	}
	if len(names) != 2 || names[0] == names[1] {
		return nil, nil, fmt.Errorf("--models %q: want two different names", f.models)
	}
	models := make([]string, len(addrs))
	for i := range addrs {
		models[i] = names[0]
		if i >= len(addrs)-2 && len(addrs) >= 6 {
			models[i] = names[1]
		}
	}
	if f.adapter == adapterKvgateConfig {
		for _, a := range addrs {
			if strings.HasSuffix(a, ":0") {
				return nil, nil, fmt.Errorf("--endpoints %s: the kvgate-config adapter names fixed ports in kvgate's configuration", a)
			}
		}
	}
	return addrs, models, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// options turns the flags into the suite's options.
func (f *conformanceFlags) options() (conformance.Options, error) {
	o := conformance.Options{Target: f.epp, Profile: conformance.Profile(f.profile), MaxBodyBytes: f.maxBody,
		ShedAfter: f.shedAfter, CaseTimeout: f.caseTimeout, WaitReady: f.wait, Only: splitList(f.only)}
	if f.epp == "" {
		return o, fmt.Errorf("--epp: required (the picker's ext_proc address)")
	}
	switch f.adapter {
	case adapterSubsetHint:
		o.PoolKnown = f.poolKnown
	case adapterKvgateConfig:
		o.PoolKnown = true
		if o.ShedAfter == 0 {
			o.ShedAfter = kvgateShedAfter
		}
	default:
		return o, fmt.Errorf("--adapter %q: want %s or %s", f.adapter, adapterSubsetHint, adapterKvgateConfig)
	}
	if o.Profile != conformance.Core && o.Profile != conformance.Extended {
		return o, fmt.Errorf("--profile %q: want core or extended", f.profile)
	}
	if f.maxBody <= 0 || f.shedAfter < 0 || f.caseTimeout <= 0 || f.wait < 0 {
		return o, fmt.Errorf("--max-body-bytes, --case-timeout must be positive and --shed-after, --wait not negative")
	}
	ids := conformance.CaseIDs()
	for _, id := range o.Only {
		if !slices.Contains(ids, id) {
			return o, fmt.Errorf("--only: no case %q (cases: %s)", id, strings.Join(ids, ", "))
		}
	}
	t, err := f.tlsConfig()
	o.TLS = t
	return o, err
}

// tlsConfig builds the client TLS of --tls-*; nil for plaintext.
func (f *conformanceFlags) tlsConfig() (*tls.Config, error) {
	if f.tlsCA == "" && f.tlsCert == "" && f.tlsKey == "" {
		return nil, nil
	}
	if f.tlsCA == "" || (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, fmt.Errorf("--tls-ca is required with TLS, and --tls-cert and --tls-key go together")
	}
	pem, err := os.ReadFile(f.tlsCA)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate", f.tlsCA)
	}
	c := &tls.Config{RootCAs: pool, ServerName: f.tlsServerName, MinVersion: tls.VersionTLS12}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func writeReportJSON(rep *conformance.Report, path string, stdout, stderr io.Writer) int {
	fh, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab conformance: --json: %v\n", err)
		return 1
	}
	if err := rep.WriteJSON(fh); err != nil {
		fh.Close()
		fmt.Fprintf(stderr, "kvgate-lab conformance: --json %s: %v\n", path, err)
		return 1
	}
	if err := fh.Close(); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab conformance: --json %s: %v\n", path, err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return 0
}

func (f *conformanceFlags) writeKvgateConfig(addrs, models []string, stdout, stderr io.Writer) int {
	if f.adapter != adapterKvgateConfig {
		fmt.Fprintf(stderr, "kvgate-lab conformance: --write-kvgate-config needs --adapter %s\n", adapterKvgateConfig)
		return 2
	}
	tok := f.tokenizer
	if tok == "" {
		d, err := modelfiles.Model("qwen3")
		if err != nil {
			fmt.Fprintf(stderr, "kvgate-lab conformance: --tokenizer: %v\n", err)
			return 2
		}
		tok = d
	}
	yaml := kvgateConformanceConfig(addrs, models, tok, f.listen, f.maxBody)
	if err := os.WriteFile(f.writeConfig, []byte(yaml), 0o644); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab conformance: --write-kvgate-config: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", f.writeConfig)
	return 0
}

// kvgateConformanceConfig is the kvgate-config adapter: kvgate's
// configuration naming the fake endpoints as engines of their models (one
// tokenizer for both), the in-memory index, an admission bound for the 429
// case (extproc.admission.max_inflight) and the body limit the suite
// checks. Active health checks are off: the endpoints exist only while the
// suite runs, and a probe that failed before it started would hold them
// out of the pool for its first cases.
func kvgateConformanceConfig(addrs, models []string, tokenizer, listen string, maxBody int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by kvgate-lab conformance --adapter %s: kvgate picking among the suite's fake endpoints.\n", adapterKvgateConfig)
	b.WriteString("models:\n")
	seen := map[string]bool{}
	for _, m := range models {
		if !seen[m] {
			seen[m] = true
			fmt.Fprintf(&b, "  - {name: %q, block_size: 16, tokenizer: %q}\n", m, tokenizer)
		}
	}
	b.WriteString("engines:\n")
	for i, a := range addrs {
		fmt.Fprintf(&b, "  - {endpoint: %q, model: %q}\n", a, models[i])
	}
	fmt.Fprintf(&b, "index: {backend: memory}\nextproc:\n  listen: %q\n  admin: \"127.0.0.1:0\"\n  max_body_bytes: %d\n", listen, maxBody)
	fmt.Fprintf(&b, "  admission: {max_inflight: %d}\n  health_check: {disabled: true}\n", kvgateShedAfter)
	return b.String()
}
