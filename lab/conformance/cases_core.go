package conformance

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Where the cases' references point.
const (
	refProposal = "GIE proposal 004-endpoint-picker-protocol"
	refExtProc  = "envoy source/extensions/filters/http/ext_proc/"
)

// testNet names addresses no picker can have in its pool (RFC 5737
// TEST-NET-1): what a client or a stale hint might name.
var testNet = []string{"192.0.2.1:8000", "192.0.2.2:8000"}

func coreCases() []Case {
	return []Case{
		{ID: "health-services", Profile: Core, Reference: refProposal + " §Health Checking",
			Checks: "grpc.health.v1 Check answers SERVING for liveness, readiness and envoy.service.ext_proc.v3.ExternalProcessor", run: caseHealth},
		{ID: "destination-header-and-metadata", Profile: Core, Reference: refProposal + " §Destination Endpoint; " + refExtProc + "ext_proc.cc Filter::setDynamicMetadata, mutation_utils.cc applyHeaderMutations",
			Checks: "one x-gateway-destination-endpoint header after the mutation, equal to dynamic metadata envoy.lb/x-gateway-destination-endpoint", run: caseAgreement},
		{ID: "destination-list-well-formed", Profile: Core, Reference: refProposal + " §Destination Endpoint; envoy override_host load_balancer.cc getSelectedHosts",
			Checks: "the list is ip:port entries, primary first, no duplicates, only offered endpoints; the primary serves the forwarded request", run: caseWellFormed},
		{ID: "subset-hint-list", Profile: Core, Reference: refProposal + " §Endpoint Subset",
			Checks: "with envoy.lb.subset_hint as a list, every endpoint named is in the hint", run: caseHintList},
		{ID: "subset-hint-string", Profile: Core, Reference: refProposal + " §Endpoint Subset; GIE pkg/lwepp/handlers/request.go (string form from header_to_metadata)",
			Checks: "with the hint as one comma-separated string, every endpoint named is in the hint", run: caseHintString},
		{ID: "subset-hint-empty", Profile: Core, Reference: refProposal + " §Endpoint Subset",
			Checks: "an empty hint is answered with an ImmediateResponse 503", run: caseHintEmpty},
		{ID: "subset-hint-unknown", Profile: Core, Reference: refProposal + " §Endpoint Subset",
			Checks: "a hint naming no endpoint of the pool is answered with an ImmediateResponse 503", run: caseHintUnknown},
		{ID: "served-endpoint-report", Profile: Core, Reference: refProposal + " §Destination Endpoint Served",
			Checks: "metadata_context envoy.lb/x-gateway-destination-endpoint-served on the response is accepted and the picker keeps serving", run: caseServed},
		{ID: "shed-429", Profile: Core, Reference: refProposal + " §Destination Endpoint (429 when the request should be dropped)",
			Checks: "over the configured load bound the picker answers ImmediateResponse 429, and admits again once the load is gone", run: caseShed},
		{ID: "full-duplex-ordering", Profile: Core, Reference: "envoy api ext_proc/v3/processing_mode.proto FULL_DUPLEX_STREAMED; " + refExtProc + "processor_state.cc ProcessorState::handleStreamedBodyCallback, handleDuplexStreamedBodyResponse, handleTrailersResponse",
			Checks: "headers reply first, then the body back whole in streamed_response replies, end_of_stream once and last (or a trailers reply)", run: caseOrdering},
		{ID: "full-duplex-large-body", Profile: Core, Reference: "envoy api ext_proc/v3/processing_mode.proto FULL_DUPLEX_STREAMED; listener.proto per_connection_buffer_limit_bytes",
			Checks: "a body of Options.MaxBodyBytes in 16 KiB chunks is routed and handed back unchanged", run: caseLargeBody},
		{ID: "response-sse-untouched", Profile: Core, Reference: refProposal + " (streaming mode); " + refExtProc + "ext_proc.cc Filter::encodeData",
			Checks: "each server-sent event is handed back before the next is sent, byte for byte; status and content-type untouched", run: caseSSE},
		{ID: "client-routing-headers", Profile: Core, Reference: "envoy source/extensions/clusters/original_dst/original_dst_cluster.cc (the header is routed on as sent); " + refProposal,
			Checks: "a client's x-gateway-destination-endpoint(-subset) headers never survive or steer the choice", run: caseSpoof},
		{ID: "cancel-mid-stream", Profile: Core, Reference: refExtProc + "ext_proc.cc Filter::onDestroy (the stream is reset when the client goes away)",
			Checks: "streams reset mid-body and mid-response leave the picker serving, and (with a load bound) release their load", run: caseCancel},
	}
}

func caseHealth(ctx context.Context, e *env) outcome {
	hc := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return fail("Check(%q): %v", svc, err)
		}
		if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fail("Check(%q) = %s, want SERVING", svc, r.GetStatus())
		}
	}
	return pass("liveness, readiness and the ext_proc service are SERVING")
}

func caseAgreement(ctx context.Context, e *env) outcome {
	x, err := e.routeOne(ctx, request{hint: e.poolHint()})
	if err != nil {
		return fail("%v", err)
	}
	defer x.finish(ctx)
	v, problem := agreement(x)
	if problem != "" {
		return fail("%s", problem)
	}
	return pass("header and envoy.lb metadata both %q", v)
}

func caseWellFormed(ctx context.Context, e *env) outcome {
	offered := e.offered()
	lists := 0
	for i := 0; i < 8; i++ {
		x, err := e.routeOne(ctx, request{hint: e.poolHint()})
		if err != nil {
			return fail("request %d: %v", i, err)
		}
		v := destinationOf(x)
		eps, problem := wellFormed(v, offered)
		if problem != "" {
			x.finish(ctx)
			return fail("request %d: %s", i, problem)
		}
		if len(eps) > 1 {
			lists++
		}
		// The primary is the one a gateway tries first: it must take the
		// request as the picker let it through.
		before := e.eps.Served(eps[0])
		code, _, err := forward(eps[0], x.req.path, x.routed, x.bodyOut)
		x.finish(ctx)
		if err != nil || code != http.StatusOK || e.eps.Served(eps[0]) != before+1 {
			return fail("request %d: the primary %s answered %d, %v", i, eps[0], code, err)
		}
	}
	return pass("8 requests: well-formed destinations (%d with fallbacks), each primary served the request", lists)
}

func caseHintList(ctx context.Context, e *env) outcome {
	offered := e.offered()
	for _, ep := range offered {
		if p := e.routeWithin(ctx, hintList(ep), []string{ep}); p != "" {
			return fail("%s", p)
		}
	}
	pair := offered[len(offered)-2:]
	if p := e.routeWithin(ctx, hintList(pair...), pair); p != "" {
		return fail("%s", p)
	}
	return pass("%d single-endpoint hints and one pair: every choice within its hint", len(offered))
}

func caseHintString(ctx context.Context, e *env) outcome {
	offered := e.offered()
	for _, ep := range offered {
		if p := e.routeWithin(ctx, hintString(ep), []string{ep}); p != "" {
			return fail("%s", p)
		}
	}
	pair := offered[:2]
	if p := e.routeWithin(ctx, hintString(pair...), pair); p != "" {
		return fail("%s", p)
	}
	return pass("%d single-endpoint string hints and %q: every choice within its hint", len(offered), hintString(pair...).GetStringValue())
}

func caseHintEmpty(ctx context.Context, e *env) outcome {
	if p := e.refusedWith(ctx, request{hint: hintList()}, http.StatusServiceUnavailable); p != "" {
		return fail("empty hint: %s", p)
	}
	return pass("an empty subset hint was answered 503")
}

func caseHintUnknown(ctx context.Context, e *env) outcome {
	if !e.opts.PoolKnown {
		return skip("the picker learns its endpoints only from the hint (adapter subset-hint), so no address is unknown to it")
	}
	if p := e.refusedWith(ctx, request{hint: hintList(testNet...)}, http.StatusServiceUnavailable); p != "" {
		return fail("hint %q: %s", testNet, p)
	}
	return pass("a hint naming only %q was answered 503", testNet)
}

func caseServed(ctx context.Context, e *env) outcome {
	offered := e.offered()
	x, err := e.routeOne(ctx, request{hint: hintList(offered[1:]...)})
	if err != nil {
		return fail("%v", err)
	}
	eps, problem := wellFormed(destinationOf(x), offered[1:])
	if problem != "" {
		x.finish(ctx)
		return fail("%s", problem)
	}
	// The data plane reports the endpoint it used; the last of the list is
	// the one a gateway reaches after walking every fallback.
	served := eps[len(eps)-1]
	events := SSEStream(e.defaultModel(), served)
	out, _, err := x.respond(ctx, served, "text/event-stream", events, false)
	if err != nil {
		x.abort()
		return fail("after reporting %s served: %v", served, err)
	}
	x.finish(ctx)
	if want := bytes.Join(toBytes(events), nil); !bytes.Equal(out, want) {
		return fail("after reporting %s served, the response came back as %q", served, out)
	}
	y, err := e.routeOne(ctx, request{hint: e.poolHint()})
	if err != nil {
		return fail("the request after the report: %v", err)
	}
	defer y.finish(ctx)
	if y.immediate != nil {
		return fail("the request after the report was refused with %d", y.status())
	}
	return pass("served %s (entry %d of %d) reported on the response; accepted, and the next request routed", served, len(eps), len(eps))
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func caseOrdering(ctx context.Context, e *env) outcome {
	body := chatBody(e.defaultModel(), false, 8<<10)
	x, err := e.routeOne(ctx, request{hint: e.poolHint(), body: body, chunks: 64})
	if err != nil {
		return fail("64 chunks: %v", err)
	}
	p := orderProblem(x, body, false)
	x.finish(ctx)
	if p != "" {
		return fail("64 chunks ending in end_of_stream: %s", p)
	}
	y, err := e.routeOne(ctx, request{hint: e.poolHint(), body: body, chunks: 8, trailers: true})
	if err != nil {
		return fail("8 chunks then trailers: %v", err)
	}
	p = orderProblem(y, body, true)
	y.finish(ctx)
	if p != "" {
		return fail("8 chunks then trailers: %s", p)
	}
	return pass("64 chunks with end_of_stream, and 8 chunks with trailers: headers first, body back whole, ends where Envoy's did")
}

// orderProblem checks a routed full-duplex exchange's replies.
func orderProblem(x *exchange, body []byte, trailers bool) string {
	if x.immediate != nil {
		return fmt.Sprintf("refused with %d", x.status())
	}
	if len(x.order) == 0 || x.order[0] != "request_headers" {
		return fmt.Sprintf("replies in order %q: the headers reply must come first (Envoy holds the headers until it)", x.order)
	}
	if x.unstreamed > 0 {
		return fmt.Sprintf("%d body replies without streamed_response (FULL_DUPLEX_STREAMED accepts only streamed body mutations)", x.unstreamed)
	}
	if !bytes.Equal(x.bodyOut, body) {
		return fmt.Sprintf("the body came back as %d bytes, want the %d sent unchanged", len(x.bodyOut), len(body))
	}
	switch {
	case trailers && x.bodyEOS > 0:
		return "a body reply carried end_of_stream although the request ends with trailers"
	case trailers && !x.trailersOK:
		return "no trailers reply"
	case !trailers && (x.bodyEOS != 1 || !x.eosLast):
		return fmt.Sprintf("%d body replies carried end_of_stream (last one: %v); want exactly one, the last", x.bodyEOS, x.eosLast)
	}
	return ""
}

func caseLargeBody(ctx context.Context, e *env) outcome {
	n := e.opts.MaxBodyBytes
	body := chatBody(e.defaultModel(), false, n)
	chunks := max(1, n/(16<<10))
	x, err := e.routeOne(ctx, request{hint: e.poolHint(), body: body, chunks: chunks})
	if err != nil {
		return fail("%d bytes in %d chunks: %v", n, chunks, err)
	}
	p := orderProblem(x, body, false)
	x.finish(ctx)
	if p != "" {
		return fail("%d bytes in %d chunks: %s", n, chunks, p)
	}
	return pass("%d bytes in %d chunks routed and handed back unchanged", n, chunks)
}

func caseSSE(ctx context.Context, e *env) outcome {
	x, err := e.routeOne(ctx, request{hint: e.poolHint(), stream: true})
	if err != nil {
		return fail("%v", err)
	}
	eps, problem := wellFormed(destinationOf(x), e.offered())
	if problem != "" {
		x.finish(ctx)
		return fail("%s", problem)
	}
	code, stream, err := forward(eps[0], x.req.path, x.routed, x.bodyOut)
	if err != nil || code != http.StatusOK {
		x.finish(ctx)
		return fail("the primary %s answered %d: %v", eps[0], code, err)
	}
	events := sseEvents(stream)
	out, hr, err := x.respond(ctx, "", "text/event-stream", events, true)
	if err != nil {
		x.abort()
		return fail("streaming %d events: %v", len(events), err)
	}
	x.finish(ctx)
	if !bytes.Equal(out, stream) {
		return fail("the event stream came back as %q, want %q", out, stream)
	}
	m := hr.GetResponse().GetHeaderMutation()
	for _, h := range m.GetSetHeaders() {
		if n := h.GetHeader().GetKey(); n == ":status" || n == "content-type" || n == "content-length" {
			return fail("the response headers reply sets %s", n)
		}
	}
	for _, n := range m.GetRemoveHeaders() {
		if n == "content-type" {
			return fail("the response headers reply removes content-type")
		}
	}
	return pass("%d events from %s handed back one by one, unchanged", len(events), eps[0])
}

func caseSpoof(ctx context.Context, e *env) outcome {
	offered := e.offered()
	spoof := testNet[0]
	for _, form := range []string{destinationHeader, hintKey} {
		x, err := e.routeOne(ctx, request{hint: e.poolHint(), headers: [][2]string{{form, spoof}}})
		if err != nil {
			return fail("client header %s: %v", form, err)
		}
		v, problem := agreement(x)
		if problem == "" {
			_, problem = wellFormed(v, offered)
		}
		x.finish(ctx)
		if problem != "" {
			return fail("client header %s: %s: %s", form, spoof, problem)
		}
	}
	return pass("client headers %s and %s naming %s were overridden and ignored", destinationHeader, hintKey, spoof)
}

// caseCancel resets streams the way Envoy does when clients go away: while
// the body is still arriving, and after routing while the response
// streams. From outside the suite can see that the picker keeps serving
// and, when the adapter configured a load bound (Options.ShedAfter), that
// the cancelled requests no longer count against it; it cannot see memory
// a picker keeps.
func caseCancel(ctx context.Context, e *env) outcome {
	n := max(8, 2*e.opts.ShedAfter)
	body := chatBody(e.defaultModel(), false, 64<<10)
	for i := 0; i < n; i++ {
		x, err := e.start(ctx, request{hint: e.poolHint(), body: body, chunks: 8, partial: true})
		if err != nil {
			return fail("stream %d: %v", i, err)
		}
		if err := <-x.sent; err != nil {
			x.abort()
			return fail("stream %d: sending half the body: %v", i, err)
		}
		x.abort()
	}
	for i := 0; i < n; i++ {
		x, err := e.routeOne(ctx, request{hint: e.poolHint()})
		if err != nil {
			return fail("routing stream %d before its reset: %v", i, err)
		}
		if x.immediate != nil && (e.opts.ShedAfter == 0 || x.status() != http.StatusTooManyRequests) {
			x.abort()
			return fail("stream %d before its reset was refused with %d", i, x.status())
		}
		if x.immediate == nil {
			// The upstream started answering; the client goes away.
			if err := x.sendResponseStart(); err != nil {
				x.abort()
				return fail("stream %d: response headers: %v", i, err)
			}
		}
		x.abort()
	}
	if p := e.admittedAgain(ctx, max(1, e.opts.ShedAfter)); p != "" {
		return fail("after %d streams reset mid-body and %d mid-response: %s", n, n, p)
	}
	if e.opts.ShedAfter == 0 {
		return pass("%d streams reset mid-body and %d mid-response; the picker still routes (no load bound configured: release not observable)", n, n)
	}
	return pass("%d streams reset mid-body and %d mid-response; %d requests then held at once, under the bound of %d", n, n, e.opts.ShedAfter, e.opts.ShedAfter)
}

// admittedAgain waits, within the case's bound, until hold requests are
// routed together (held open, then finished): the load of requests that
// ended must leave the picker's books. A refusal is retried, as the
// picker releases a reset stream when it sees the reset.
func (e *env) admittedAgain(ctx context.Context, hold int) string {
	last := ""
	for {
		held, p := e.holdN(ctx, hold)
		for _, x := range held {
			x.finish(ctx)
		}
		if p == "" {
			return ""
		}
		last = p
		if err := pause(ctx); err != nil {
			return fmt.Sprintf("still refused when the case's bound ran out: %s", last)
		}
	}
}

// holdN routes n requests and keeps them open (routed, no response yet).
func (e *env) holdN(ctx context.Context, n int) ([]*exchange, string) {
	var held []*exchange
	for i := 0; i < n; i++ {
		x, err := e.routeOne(ctx, request{hint: e.poolHint()})
		if err != nil {
			return held, fmt.Sprintf("request %d: %v", i+1, err)
		}
		held = append(held, x)
		if x.immediate != nil {
			return held, fmt.Sprintf("request %d of %d refused with %d", i+1, n, x.status())
		}
	}
	return held, ""
}

func caseShed(ctx context.Context, e *env) outcome {
	n := e.opts.ShedAfter
	if n == 0 {
		return skip("the adapter configured no load bound (Options.ShedAfter), so no request should be dropped")
	}
	held, p := e.holdN(ctx, n)
	defer func() {
		for _, x := range held {
			x.finish(ctx)
		}
	}()
	if p != "" {
		return fail("below the bound of %d: %s", n, p)
	}
	if p := e.refusedWith(ctx, request{hint: e.poolHint()}, http.StatusTooManyRequests); p != "" {
		return fail("with %d requests in flight (the bound): %s", n, p)
	}
	for _, x := range held {
		x.finish(ctx)
	}
	held = nil
	if p := e.admittedAgain(ctx, n); p != "" {
		return fail("after the %d requests finished: %s", n, p)
	}
	return pass("request %d over the bound answered 429; admitted again once the %d finished", n+1, n)
}
