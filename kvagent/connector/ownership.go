package connector

import (
	"fmt"
	"strings"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Whose namespace is it: the KV bytes, token ids and residency of a
// namespace go only to its owner. On the engine socket that is the
// connection that registered it (an engine serving model m registered "m"
// and reads "m", "m/<lora>", "m/<cache salt>"); on the peer listener, a
// peer that Config.PeerNamespaces lets fetch it (every peer, without
// rules).

// NamespaceRule lets the peer whose certificate names Peer — its subject
// CN or one of its DNS, IP or URI SANs — look up and fetch Namespaces:
// exact names, "name/*" for name's sub-namespaces, or "*".
type NamespaceRule struct {
	Peer       string
	Namespaces []string
}

func checkRules(rules []NamespaceRule) error {
	for i, r := range rules {
		if r.Peer == "" {
			return fmt.Errorf("connector: peer namespace rule %d: no peer name", i)
		}
		if len(r.Namespaces) == 0 {
			return fmt.Errorf("connector: peer namespace rule %d (%s): no namespaces", i, r.Peer)
		}
		for j, p := range r.Namespaces {
			if p == "" || (strings.Contains(p, "*") && p != "*" && (!strings.HasSuffix(p, "/*") || strings.Count(p, "*") > 1)) {
				return fmt.Errorf("connector: peer namespace rule %d (%s): namespaces[%d] %q: want a name, name/* or *", i, r.Peer, j, p)
			}
		}
	}
	return nil
}

// owns reports whether a connection that registered reg may use ns.
func owns(reg, ns string) bool {
	return ns == reg || (len(ns) > len(reg) && ns[len(reg)] == '/' && strings.HasPrefix(ns, reg))
}

func matchNamespace(pattern, ns string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasSuffix(pattern, "/*"):
		return owns(strings.TrimSuffix(pattern, "/*"), ns) && ns != strings.TrimSuffix(pattern, "/*")
	}
	return pattern == ns
}

// peerMay reports whether a peer whose certificate gives names may use ns.
func peerMay(rules []NamespaceRule, names []string, ns string) bool {
	if len(rules) == 0 {
		return true
	}
	for _, r := range rules {
		named := false
		for _, n := range names {
			if _, v, _ := strings.Cut(n, "="); v == r.Peer {
				named = true
				break
			}
		}
		if !named {
			continue
		}
		for _, p := range r.Namespaces {
			if matchNamespace(p, ns) {
				return true
			}
		}
	}
	return false
}

func requestNamespace(m proto.Message) (string, bool) {
	switch r := m.(type) {
	case *pb.LookupRequest:
		return r.GetNamespace(), true
	case *pb.ReserveRequest:
		return r.GetNamespace(), true
	case *pb.CommitRequest:
		return r.GetNamespace(), true
	case *pb.AcquireRequest:
		return r.GetNamespace(), true
	}
	return "", false
}

// mayUse refuses a request naming a namespace its caller does not own.
func (s *Server) mayUse(id uint64, c client, m proto.Message) error {
	ns, ok := requestNamespace(m)
	if !ok {
		return nil
	}
	if s.cfg.Peer {
		if !peerMay(s.cfg.PeerNamespaces, c.names, ns) {
			return status.Errorf(codes.PermissionDenied, "namespace %q: no kvagent.peer.namespaces rule lets this peer (%s) fetch it", ns, c.identity)
		}
		return nil
	}
	reg := s.l.namespace(id)
	switch {
	case reg == "":
		return status.Errorf(codes.FailedPrecondition, "namespace %q: Register first (a connection serves the namespace it registered)", ns)
	case !owns(reg, ns):
		return status.Errorf(codes.PermissionDenied, "namespace %q: this connection registered %q and serves it and %q/... only", ns, reg, reg)
	}
	return nil
}
