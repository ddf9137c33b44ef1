// Package conformance is a vendor-neutral conformance suite for endpoint
// pickers: the Gateway API Inference Extension's endpoint-picker protocol
// (gateway-api-inference-extension docs/proposals/004-endpoint-picker-protocol,
// read at commit 0fc3b12) spoken over Envoy's ext_proc service, as Envoy's
// ext_proc filter speaks it (envoyproxy/envoy
// source/extensions/filters/http/ext_proc/). It plays the gateway (the
// ext_proc client) and the model servers (fake endpoints on loopback), and
// checks any picker reachable at an address.
//
// The suite imports nothing of kvgate's own packages
// (internal/importrules/conformance_test.go): the only thing a picker's
// authors adapt is how their picker learns the fake endpoints, which is
// the caller's business (Options.PoolKnown, Options.ShedAfter, the models
// StartEndpoints gives the endpoints).
package conformance

import (
	"context"
	"crypto/tls"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Profile selects the cases run: Core is the protocol every picker owes;
// Extended adds conventions beyond proposal 004 (body-based model routing,
// llm-d's P/D header, GIE's objective header).
type Profile string

const (
	Core     Profile = "core"
	Extended Profile = "extended"
)

// Options describe one run.
type Options struct {
	// Target is the picker's ext_proc gRPC address (host:port).
	Target string
	// TLS, when set, is used to dial Target; nil dials plaintext.
	TLS *tls.Config
	// Profile: Core (default) or Extended.
	Profile Profile
	// Endpoints are the fake model servers the picker may route to
	// (StartEndpoints).
	Endpoints *Endpoints
	// PoolKnown says the picker was told the endpoints by its own
	// configuration (an adapter wrote it): it picks from them without a
	// subset hint, and an address outside them is unknown to it. false: the
	// picker learns the endpoints only from the subset hint each request
	// carries, and cases that need a pool the picker knows are skipped.
	PoolKnown bool
	// ShedAfter is the number of requests in flight at which the adapter
	// configured the picker to shed (answer 429); 0 when it did not, and
	// the case that needs it is skipped.
	ShedAfter int
	// MaxBodyBytes is the largest request body the picker documents
	// accepting; the large-body case sends exactly that much.
	MaxBodyBytes int
	// CaseTimeout bounds each case (default 20 s).
	CaseTimeout time.Duration
	// Only, when non-empty, runs only the cases named.
	Only []string
	// WaitReady, when positive, is how long to wait before the first case
	// for the picker to answer its readiness health check SERVING (a
	// picker started just before the suite may still be loading).
	WaitReady time.Duration
}

// DefaultMaxBodyBytes is Options.MaxBodyBytes' default: 1 MiB, the default
// per-connection buffer limit of an Envoy listener (envoy
// api/envoy/config/listener/v3/listener.proto per_connection_buffer_limit_bytes),
// which is what a gateway admits without configuration.
const DefaultMaxBodyBytes = 1 << 20

const defaultCaseTimeout = 20 * time.Second

// Status is one case's outcome.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Case is one check of the protocol, with the text it checks.
type Case struct {
	ID      string
	Profile Profile
	// Reference names the proposal section or Envoy source function the
	// case checks.
	Reference string
	// Checks says in one line what must hold.
	Checks string
	run    func(ctx context.Context, e *env) outcome
}

// outcome is what a case's run returns.
type outcome struct {
	status Status
	detail string
}

func pass(format string, a ...any) outcome { return outcome{Pass, fmt.Sprintf(format, a...)} }
func fail(format string, a ...any) outcome { return outcome{Fail, fmt.Sprintf(format, a...)} }
func skip(format string, a ...any) outcome { return outcome{Skip, fmt.Sprintf(format, a...)} }

// Cases lists every case of the suite, core first.
func Cases() []Case {
	all := append(coreCases(), extendedCases()...)
	return all
}

// Run dials the picker and runs the cases of o.Profile in order.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Target == "" || o.Endpoints == nil || len(o.Endpoints.Addrs()) < 4 {
		return nil, fmt.Errorf("conformance: a target and at least 4 endpoints are required")
	}
	if o.Profile == "" {
		o.Profile = Core
	}
	if o.Profile != Core && o.Profile != Extended {
		return nil, fmt.Errorf("conformance: profile %q: want core or extended", o.Profile)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.CaseTimeout <= 0 {
		o.CaseTimeout = defaultCaseTimeout
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	conn, err := grpc.NewClient(o.Target, grpc.WithTransportCredentials(creds),
		// A body up to MaxBodyBytes comes back in the picker's answers.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxBodyBytes+1<<20), grpc.MaxCallSendMsgSize(o.MaxBodyBytes+1<<20)))
	if err != nil {
		return nil, fmt.Errorf("conformance: dial %s: %w", o.Target, err)
	}
	defer conn.Close()
	if o.WaitReady > 0 {
		waitReady(ctx, conn, o.WaitReady)
	}
	e := &env{opts: o, conn: conn, eps: o.Endpoints}
	rep := &Report{Target: o.Target, Profile: o.Profile, PoolKnown: o.PoolKnown, Started: time.Now().UTC()}
	only := map[string]bool{}
	for _, id := range o.Only {
		only[id] = true
	}
	for _, c := range Cases() {
		if c.Profile == Extended && o.Profile != Extended {
			continue
		}
		if len(only) > 0 && !only[c.ID] {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, o.CaseTimeout)
		out := c.run(cctx, e)
		if out.status == Fail && cctx.Err() != nil && ctx.Err() == nil {
			out.detail += fmt.Sprintf(" (the case ran past its %s bound)", o.CaseTimeout)
		}
		cancel()
		rep.Results = append(rep.Results, Result{ID: c.ID, Profile: c.Profile, Status: out.status, Reference: c.Reference, Checks: c.Checks, Detail: out.detail})
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	return rep, nil
}

// waitReady polls the readiness health service until it answers SERVING
// or Unimplemented (a picker without health services: the health case
// says so), or d passes. Either way the cases run and say what they find.
func waitReady(ctx context.Context, conn *grpc.ClientConn, d time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	for {
		r, err := hc.Check(wctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		if r.GetStatus() == healthpb.HealthCheckResponse_SERVING || status.Code(err) == codes.Unimplemented {
			return
		}
		if pause(wctx) != nil {
			return
		}
	}
}

// CaseIDs lists the case ids, sorted, for flag validation.
func CaseIDs() []string {
	var ids []string
	for _, c := range Cases() {
		ids = append(ids, c.ID)
	}
	sort.Strings(ids)
	return ids
}
