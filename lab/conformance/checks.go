package conformance

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// hintList is the subset hint as a control plane writes it: a list of
// ip:port strings (proposal 004, "Endpoint Subset").
func hintList(eps ...string) *structpb.Value {
	vs := make([]*structpb.Value, 0, len(eps))
	for _, e := range eps {
		vs = append(vs, structpb.NewStringValue(e))
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

// hintString is the subset hint as Envoy's header_to_metadata filter
// writes it from an x-gateway-destination-endpoint-subset request header
// set by the gateway: one string, the header's comma-separated list (GIE
// pkg/lwepp/handlers/request.go reads both forms).
func hintString(eps ...string) *structpb.Value {
	return structpb.NewStringValue(strings.Join(eps, ", "))
}

// offered is the default model's endpoints: the pool the cases route in.
func (e *env) offered() []string { return e.eps.Serving(e.defaultModel()) }

// poolHint is the hint a request carries when no case-specific one is
// needed: none when the picker knows its pool, else the whole pool (the
// only way such a picker learns it).
func (e *env) poolHint() *structpb.Value {
	if e.opts.PoolKnown {
		return nil
	}
	return hintList(e.offered()...)
}

// routeOne plays one request up to its routing.
func (e *env) routeOne(ctx context.Context, r request) (*exchange, error) {
	x, err := e.start(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := x.route(ctx); err != nil {
		x.abort()
		return nil, err
	}
	return x, nil
}

// agreement checks that the picker routed the request and said where the
// same way in both places (proposal 004, "Destination Endpoint": the
// header and envoy.lb metadata, never two different values). It returns
// the value.
func agreement(x *exchange) (string, string) {
	if x.immediate != nil {
		return "", fmt.Sprintf("the picker refused the request with an immediate response, status %d", x.status())
	}
	if x.mutationErr != nil {
		return "", fmt.Sprintf("Envoy would reject the picker's header mutation: %v", x.mutationErr)
	}
	hdr, meta, ok := x.destination()
	if len(hdr) != 1 {
		return "", fmt.Sprintf("after the picker's mutation the request carries %d %s headers %q; want exactly one", len(hdr), destinationHeader, hdr)
	}
	if !ok {
		var nss []string
		for ns := range x.metadata {
			nss = append(nss, ns)
		}
		return "", fmt.Sprintf("no string %s in dynamic metadata namespace %s (namespaces sent: %q)", destinationKey, lbNamespace, nss)
	}
	if hdr[0] != meta {
		return "", fmt.Sprintf("header %q and metadata %q differ", hdr[0], meta)
	}
	return meta, ""
}

// destinationOf is the value the gateway would route on: the metadata's,
// else the header's.
func destinationOf(x *exchange) string {
	hdr, meta, ok := x.destination()
	if ok {
		return meta
	}
	if len(hdr) > 0 {
		return hdr[0]
	}
	return ""
}

// wellFormed checks a destination list: ip:port entries, no duplicates,
// each one offered to the picker.
func wellFormed(v string, offered []string) ([]string, string) {
	eps, err := parseDestination(v)
	if err != nil {
		return nil, fmt.Sprintf("destination %q: %v", v, err)
	}
	seen := map[string]bool{}
	for _, ep := range eps {
		if seen[ep] {
			return nil, fmt.Sprintf("destination %q lists %s twice", v, ep)
		}
		seen[ep] = true
		if !contains(offered, ep) {
			return nil, fmt.Sprintf("destination %q names %s, which was not offered (offered %q)", v, ep, offered)
		}
	}
	return eps, ""
}

// routeWithin routes one request carrying hint and checks that every
// endpoint it names is in allowed.
func (e *env) routeWithin(ctx context.Context, hint *structpb.Value, allowed []string) string {
	x, err := e.routeOne(ctx, request{hint: hint})
	if err != nil {
		return err.Error()
	}
	defer x.finish(ctx)
	if x.immediate != nil {
		return fmt.Sprintf("hint %v: refused with status %d", allowed, x.status())
	}
	v := destinationOf(x)
	if _, problem := wellFormed(v, allowed); problem != "" {
		return fmt.Sprintf("hint %q: %s", allowed, problem)
	}
	return ""
}

// refusedWith routes one request and checks it was refused with an
// immediate response of status want; a gRPC error instead would reach the
// client as the filter's status_on_error, 500 by default (ext_proc.cc
// Filter::onGrpcError).
func (e *env) refusedWith(ctx context.Context, r request, want int) string {
	x, err := e.routeOne(ctx, r)
	if err != nil {
		return fmt.Sprintf("no immediate response: %v (Envoy answers a failed stream with status_on_error, 500 by default)", err)
	}
	defer x.finish(ctx)
	if x.immediate == nil {
		return fmt.Sprintf("the request was routed to %q", destinationOf(x))
	}
	if x.status() != want {
		return fmt.Sprintf("immediate response status %d, want %d", x.status(), want)
	}
	return ""
}

// sseEvents splits an event stream into its events, each with its
// terminating blank line, as a server flushes them.
func sseEvents(b []byte) []string {
	var out []string
	s := string(b)
	for s != "" {
		i := strings.Index(s, "\n\n")
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i+2])
		s = s[i+2:]
	}
	return out
}
