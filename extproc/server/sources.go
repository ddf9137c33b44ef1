package server

import (
	"net"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// A source is the client a request came from, as Envoy reports it. One
// source may hold at most its share of the open streams while others need
// them: a client opening thousands of slow uploads (each one ext_proc
// stream for as long as its body takes, FULL_DUPLEX_STREAMED) must not
// take every stream kvgate serves.
//
// The rule (admitSource): a source already holding sourceShare streams
// (extproc.streams.max_open_per_source_percent of max_open) gets no other
// while fewer than sourceShare slots are free. Alone it may use up to
// max_open − sourceShare; it can never push the free slots below one
// share, which the other sources' requests (milliseconds each) then use.
// A source below its share is never refused by this rule.

// sourceOf is the request's source key: the configured header's last
// entry when Config.SourceHeader is set (x-forwarded-for, to which Envoy's
// HttpConnectionManager appends the downstream peer when use_remote_address
// is true: source/common/http/conn_manager_utility.cc,
// ConnectionManagerUtility::mutateRequestHeaders; a client-sent header is
// trusted only that way), or
// else the IP of Envoy's source.address request attribute, which the
// ext_proc filter sends only when its request_attributes list it
// (matching_utils.cc ExpressionManager::evaluateAttributes). "" when
// neither is there: such streams share nothing and are bounded by
// max_open alone.
func (s *Server) sourceOf(req *Request) string {
	if h := s.cfg.SourceHeader; h != "" {
		v := req.Headers[h]
		if i := strings.LastIndexByte(v, ','); i >= 0 {
			v = v[i+1:]
		}
		v = strings.TrimSpace(v)
		if len(v) > maxSourceBytes {
			v = v[:maxSourceBytes]
		}
		return v
	}
	if req.Source == "" {
		return ""
	}
	// source.address is "ip:port" (Envoy's Address::asString): the port
	// is the client's ephemeral one, different for each connection.
	if host, _, err := net.SplitHostPort(req.Source); err == nil {
		return host
	}
	return req.Source
}

// admitSource counts one more stream for source, or refuses it (false)
// when the source holds its share and fewer than a share of slots are
// free. The stream itself is already counted in active.
func (s *Server) admitSource(source string) bool {
	if source == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bySource[source] >= s.sourceShare && s.cfg.MaxOpenStreams-s.active < s.sourceShare {
		return false
	}
	s.bySource[source]++
	return true
}

func (s *Server) leaveSourceLocked(source string) {
	if source == "" {
		return
	}
	if n := s.bySource[source] - 1; n > 0 {
		s.bySource[source] = n
	} else {
		delete(s.bySource, source)
	}
}

// peekWait bounds how long a refused stream waits for its request headers,
// only to name its source in the log.
const peekWait = 250 * time.Millisecond

// peekSource reads the first message of a stream about to be refused for
// its source (Envoy sends the request headers first, at once); "" when
// it does not come within peekWait. The reader ends with the stream.
func (s *Server) peekSource(stream extprocv3.ExternalProcessor_ProcessServer) string {
	got := make(chan *extprocv3.ProcessingRequest, 1)
	go func() {
		m, err := stream.Recv()
		if err != nil {
			m = nil
		}
		got <- m
	}()
	t := time.NewTimer(peekWait)
	defer t.Stop()
	select {
	case m := <-got:
		h := m.GetRequestHeaders()
		if h == nil {
			return ""
		}
		req, _, _, err := decodeRequestHeaders(h.GetHeaders(), s.cfg.MaxHeaderCount, s.cfg.MaxHeaderBytes)
		if err != nil {
			return ""
		}
		req.Source = sourceAddress(m.GetAttributes())
		return s.sourceOf(&req)
	case <-t.C:
		return ""
	}
}
